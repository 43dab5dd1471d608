"""The e2e checker's folds catch what they are there to catch, on hand-made logs."""

from schemas import events as ev
from schemas.types import ClaimSpec, Grant
from tests.service.helpers import h100_node

from bench.e2e.check import Checker

NODE = "n0"


def submitted(claim_id: str, **spec) -> ev.ClaimSubmitted:
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace="ns", **spec))


def allocated(claim_id: str, *cards: int, milli: int = 1000) -> ev.ClaimAllocated:
    grants = [Grant(node=NODE, uuid=f"GPU-{NODE}-{c}", index=c, milli=milli) for c in cards]
    return ev.ClaimAllocated(claim_id=claim_id, namespace="ns", node=NODE, grants=grants)


def bound(claim_id: str, *cards: int) -> ev.ClaimBound:
    return ev.ClaimBound(claim_id=claim_id, node=NODE,
                         env={"NVIDIA_VISIBLE_DEVICES": ",".join(f"GPU-{NODE}-{c}" for c in cards)})


def check(*events, since: int = 1):
    return Checker(since).fold(enumerate(events, start=1)).figures()


def test_a_clean_log_has_nothing_to_report():
    found = check(h100_node(NODE), submitted("a"), ev.DecisionBatch(decisions=[allocated("a", 0)]),
                  bound("a", 0), ev.ClaimReleased(claim_id="a"))
    assert found["allocated"] == found["bindings"] == 1
    assert {k: v for k, v in found.items() if k not in ("allocated", "decided", "bindings")} == {
        "double_booked": 0, "void_allocations": 0, "bound_void": 0, "bound_after_end": 0,
        "bound_foreign": 0, "bound_twice": 0, "bound_after_end_reallocated": 0}


def test_a_device_granted_to_two_live_claims_is_double_booked_though_the_fold_voids_it():
    found = check(h100_node(NODE), submitted("a"), submitted("b"),
                  ev.DecisionBatch(decisions=[allocated("a", 0)]),
                  ev.DecisionBatch(decisions=[allocated("b", 0, 1)]))
    assert found["double_booked"] == 1 and found["void_allocations"] == 1


def test_shares_that_fit_one_card_are_not_double_booked_and_ones_that_do_not_are():
    fits = check(h100_node(NODE), submitted("a", gpu_milli=500), submitted("b", gpu_milli=500),
                 ev.DecisionBatch(decisions=[allocated("a", 0, milli=500), allocated("b", 0, milli=500)]))
    assert fits["double_booked"] == 0
    over = check(h100_node(NODE), submitted("a", gpu_milli=600), submitted("b", gpu_milli=600),
                 ev.DecisionBatch(decisions=[allocated("a", 0, milli=600), allocated("b", 0, milli=600)]))
    assert over["double_booked"] == 1


def test_a_released_claim_frees_its_device_for_the_next():
    found = check(h100_node(NODE), submitted("a"), submitted("b"),
                  ev.DecisionBatch(decisions=[allocated("a", 0)]), ev.ClaimReleased(claim_id="a"),
                  ev.DecisionBatch(decisions=[allocated("b", 0)]))
    assert found["double_booked"] == 0 and found["void_allocations"] == 0


def test_binding_a_void_allocation_onto_a_device_another_claim_holds():
    found = check(h100_node(NODE), submitted("a"), submitted("b"),
                  ev.DecisionBatch(decisions=[allocated("a", 0)]),
                  ev.DecisionBatch(decisions=[allocated("b", 0)]), bound("a", 0), bound("b", 0))
    assert (found["bound_void"], found["bound_foreign"]) == (1, 1)


def test_a_binding_after_the_release_onto_a_device_granted_again_is_told_apart():
    found = check(h100_node(NODE), submitted("a"), submitted("b"),
                  ev.DecisionBatch(decisions=[allocated("a", 0)]), ev.ClaimReleased(claim_id="a"),
                  ev.DecisionBatch(decisions=[allocated("b", 0)]), bound("a", 0))
    assert (found["bound_after_end"], found["bound_after_end_reallocated"], found["bound_foreign"]) == (1, 1, 0)


def test_binding_after_the_release_and_binding_twice():
    found = check(h100_node(NODE), submitted("a"), ev.DecisionBatch(decisions=[allocated("a", 0)]),
                  bound("a", 0), ev.ClaimReleased(claim_id="a"), bound("a", 0))
    assert (found["bound_after_end"], found["bound_twice"], found["bound_void"]) == (1, 1, 0)


def test_a_binding_in_an_event_batch_is_judged_like_one_on_its_own():
    found = check(h100_node(NODE), submitted("a"), ev.EventBatch(events=[bound("a", 0)]))
    assert found["bound_void"] == 1


def test_only_what_happens_from_since_on_is_counted():
    found = check(h100_node(NODE), submitted("a"), submitted("b"),
                  ev.DecisionBatch(decisions=[allocated("a", 0)]),
                  ev.DecisionBatch(decisions=[allocated("b", 0)]), submitted("c"), since=6)
    assert found["double_booked"] == 0 and found["allocated"] == 0
