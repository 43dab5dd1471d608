"""`schemas.authority.admits` (one function per event type, node subjects remembered with the node
admitted on them, a batch's members of a type its subject admits whatever they say settled once)
answers exactly as the table's plain reading did: the reference below is that reading, kept as it
was before session 29, and both are asked the same sequences of (subject, event), odd ids, forged
subjects, fleets, batches and dead letters included."""

from __future__ import annotations

import typing
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import authority
from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec, DeviceUsage, QuotaSpec, Reason


def _reference_checker(pattern: authority.Pattern):
    prefix, key, suffix = pattern
    start, tail = len(prefix), len(suffix)
    if not key:
        return lambda subject, event: subject == prefix

    def token_of(subject: str) -> str:
        if not subject.startswith(prefix) or not subject.endswith(suffix):
            return ""
        token = subject[start:len(subject) - tail]
        return "" if "." in token else token

    if key == "*":
        return lambda subject, event: bool(token_of(subject))
    if key == "node^":
        return lambda subject, event: (token_of(subject) != ""
                                       and authority._tok(authority._field(event, "node")).startswith(token_of(subject)))

    def keyed(subject: str, event: Any) -> bool:
        value = getattr(event, key.split(".")[0])
        for name in key.split(".")[1:]:
            value = getattr(value, name)
        if not value:
            return False
        if subject == prefix + value + suffix:
            return subjects._SAFE_TOKEN.fullmatch(value) is not None or subjects._token(value) == value
        return subject == prefix + subjects._token(value) + suffix
    return keyed


_EXACT = frozenset((kind, p.prefix) for kind, rule in authority.AUTHORITY.items() for p in rule.patterns if not p.key)
_KEYED = {kind: tuple(_reference_checker(p) for p in rule.patterns if p.key)
          for kind, rule in authority.AUTHORITY.items()}


def reference_admits(subject: str, event: Any) -> bool:
    kind = type(event)
    if (kind, subject) not in _EXACT:
        for check in _KEYED.get(kind, ()):
            if check(subject, event):
                break
        else:
            return False
    if kind is ev.EventBatch:
        for member in event.events:
            if not reference_admits(subject, member):
                return False
    return True


# ids: plain, with characters a subject token may not hold, unicode, empty, and look-alikes
# (few of them, so that subjects and ids meet often: a subject remembered, then asked again)
ids = st.one_of(st.sampled_from(["n0", "n1", "n.1", "n_1", ""]),
                st.sampled_from(["live-n1", "live-", "c.1", "c_1", "é", "a b", "*", "x:y", "n0.bound"]))


@st.composite
def events(draw, depth: int = 0):
    i, j = draw(ids), draw(ids)
    choices = [
        ev.NodeHeartbeat(node=i), ev.ClaimBound(claim_id=j, node=i, env={}),
        ev.NodeRegistered(node=i, devices=[]), ev.UsageObserved(node=i, devices=[DeviceUsage(uuid="u")]),
        ev.ClaimReleased(claim_id=i), ev.LeaseRenewed(claim_id=i), ev.ClaimActivity(claim_id=i),
        ev.ClaimSubmitted(claim=ClaimSpec(claim_id=i, namespace="a")),
        ev.ClaimRejected(claim_id=i, code="invalid"), ev.ClaimEnding(claim_id=i, decision="x", fence=1, node=j),
        ev.QuotaSet(namespace=i, spec=QuotaSpec()), ev.QuotaDefaultDeleted(),
        ev.DriftDetected(node=i, kind="x"), ev.DeviceIgnoreChanged(node=i, uuid="u", ignored=True),
        ev.PoolDeleted(pool=i), ev.EndpointDeleted(name=i), ev.SlotRequestStarted(slot_id=i, request_id=j),
        ev.ClaimPending(claim_id=i, reasons=[Reason(code="x", message="y")]),
        ev.DecisionBatch(decisions=[ev.ClaimPending(claim_id=i, reasons=[])]),
    ]
    if depth == 0:
        members = draw(st.lists(events(depth=1), max_size=4))
        alike = [draw(st.sampled_from(choices[:2] + choices[4:5])) for _ in range(draw(st.integers(0, 3)))]
        batches = [ev.EventBatch(events=members), ev.EventBatch(events=alike + members[:1] + alike)]
        return draw(st.sampled_from(choices + batches * 6))
    return draw(st.sampled_from(choices))


def _subjects_of(event) -> list[str]:
    home = authority.home_subject(event) if type(event) in authority.AUTHORITY else subjects.DECISIONS
    return [home, home + ".x", subjects.DEAD_LETTER + ".intake", subjects.INTAKE_BATCHES, subjects.DECISIONS]


@st.composite
def stored(draw):
    event = draw(events())
    other = draw(events())
    token = draw(ids)
    subject = draw(st.sampled_from(_subjects_of(event) + _subjects_of(other) + [
        subjects.node(token), subjects.node_bindings(token), subjects.claim(token), subjects.fleet(token),
        "gpu.evt.node." + token, "gpu.evt.node." + token + ".bound", "gpu.evt.claim." + token,
        "gpu.evt.fleet." + token, "gpu.evt.fence." + token + ".release", "gpu.evt.quota." + token]))
    return subject, event


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stored(), min_size=1, max_size=30))
def test_admits_answers_as_the_plain_reading_of_the_table(sequence):
    for subject, event in sequence:  # in order: what one call remembers must not change the next
        assert authority.admits(subject, event) == reference_admits(subject, event), (subject, event)
        table = authority.ADMIT.get(type(event))
        if table is not None:
            assert table(subject, event) == reference_admits(subject, event), (subject, event)


def test_a_node_subject_remembered_for_one_node_refuses_another():
    """The memo is keyed by subject and holds the node admitted there: the same subject with
    another node (or a node whose token rewrites to it) is checked afresh."""
    beat = subjects.node("n9")
    assert authority.admits(beat, ev.NodeHeartbeat(node="n9"))
    assert authority.admits(beat, ev.NodeHeartbeat(node="n9"))
    assert not authority.admits(beat, ev.NodeHeartbeat(node="n99"))
    assert not authority.admits(beat, ev.NodeHeartbeat(node=""))
    odd = subjects.node("n.9")  # gpu.evt.node.n_9: the writer's rewrite of an odd name
    assert authority.admits(odd, ev.NodeHeartbeat(node="n.9"))
    assert authority.admits(odd, ev.NodeHeartbeat(node="n_9"))
    assert authority.admits(odd, ev.NodeHeartbeat(node="n.9"))
    assert not authority.admits(odd, ev.NodeHeartbeat(node="n:9"))


def test_a_batch_settles_a_type_only_where_its_subject_admits_that_type_whatever_it_says():
    submit = ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c", namespace="a"))
    release = ev.ClaimReleased(claim_id="c")
    intake = subjects.INTAKE_BATCHES
    assert authority.admits(intake, ev.EventBatch(events=[submit, release, submit, release]))
    fence = "gpu.evt.fence.n0.release"
    assert authority.admits(fence, ev.EventBatch(events=[release, release]))
    assert not authority.admits(fence, ev.EventBatch(events=[release, submit]))
    bindings = subjects.node_bindings("n0")
    mine, other = ev.ClaimBound(claim_id="c", node="n0", env={}), ev.ClaimBound(claim_id="d", node="n1", env={})
    assert authority.admits(bindings, ev.EventBatch(events=[mine, mine]))
    assert not authority.admits(bindings, ev.EventBatch(events=[mine, other]))  # each member checked


def test_every_type_of_the_contract_has_its_function():
    assert set(typing.get_args(ev.AnyEvent)) <= set(authority.ADMIT)
