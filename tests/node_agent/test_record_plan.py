"""What an agent does with its node's record: stop what ended, bind what is new, adopt what was
bound before it knew, never put two live claims over one device's capacity."""

from schemas.grants import LiveClaim, NodeGrants
from schemas.types import Grant

from services.node_agent.record_plan import plan


def claim(claim_id, *cards, milli=1000, bound=False):
    return LiveClaim(claim_id=claim_id, namespace="ns", bound=bound,
                     grants=[Grant(node="n", uuid=f"GPU-{c}", index=c, milli=milli) for c in cards])


def record(*claims, seq=10):
    return NodeGrants(node="n", through_seq=seq, claims=list(claims))


def test_new_claims_are_bound_and_known_ones_left_alone():
    a, b = claim("a", 0), claim("b", 1)
    todo = plan(record(a, b), live={"a": a}, bound={"a"})
    assert (todo.stop, [c.claim_id for c in todo.bind], todo.adopt, todo.held) == ([], ["b"], [], [])


def test_a_claim_the_record_no_longer_lists_is_stopped():
    a, b = claim("a", 0), claim("b", 1)
    todo = plan(record(b), live={"a": a, "b": b}, bound={"a", "b"})
    assert todo.stop == ["a"] and not todo.bind


def test_a_claim_bound_before_a_restart_is_adopted_not_bound_again():
    flagged, learnt = claim("a", 0, bound=True), claim("b", 1)
    todo = plan(record(flagged, learnt), live={}, bound={"b"})
    assert [c.claim_id for c in todo.adopt] == ["a", "b"] and not todo.bind


def test_the_device_of_an_ended_claim_goes_to_the_new_one_in_the_same_record():
    old, new = claim("old", 0), claim("new", 0)
    todo = plan(record(new), live={"old": old}, bound={"old"})
    assert todo.stop == ["old"] and [c.claim_id for c in todo.bind] == ["new"]


def test_two_live_claims_over_one_device_are_never_both_bound():
    held, intruder = claim("held", 0), claim("intruder", 0, 1)
    todo = plan(record(held, intruder), live={"held": held}, bound={"held"})
    assert not todo.bind and [(c.claim_id, d) for c, d in todo.held] == [("intruder", "GPU-0")]


def test_shares_that_fit_one_device_are_bound_together_and_one_too_many_is_held():
    a, b, c = (claim(x, 0, milli=400) for x in "abc")
    todo = plan(record(a, b, c), live={}, bound=set())
    assert [x.claim_id for x in todo.bind] == ["a", "b"] and [x.claim_id for x, _ in todo.held] == ["c"]
