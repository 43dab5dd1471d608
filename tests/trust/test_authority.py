"""The writer-authority table: complete, and strict about subjects (pure, no server)."""

from __future__ import annotations

import typing

from schemas import authority
from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec, Grant, QuotaSpec
from tests.service.helpers import h100_node


def _event_types() -> set[type]:
    return set(typing.get_args(ev.AnyEvent))


def test_every_event_type_has_a_row():
    missing = sorted(t.__name__ for t in _event_types() if t not in authority.AUTHORITY)
    assert not missing, f"event types without a row in schemas/authority.py: {missing}"


def test_decisions_are_believed_only_inside_a_decision_batch():
    for decision in ev.DECISION_TYPES:
        assert authority.writer_of(decision) == authority.IN_DECISION_BATCH
        bare = _example_decision(decision)
        assert not authority.admits(subjects.DECISIONS, bare), decision.__name__
        assert authority.admits(subjects.DECISIONS, ev.DecisionBatch(decisions=[bare]))
    assert authority.writer_of(ev.DecisionBatch) == authority.ALLOCATOR


def _example_decision(kind: type) -> ev.Event:
    fields = {f: "x" for f in kind.__struct_fields__ if f not in ("v", "at")}
    values = {"grants": [], "reasons": [], "released": [], "lenders": [], "through": [],
              "explain": [], "last_heartbeat": 0.0, "idle_since": 0.0, "observed_at": 0.0,
              "grace_s": 0.0, "tflops": 0.0, "vram_mib": 0, "limit_tflops": 0.0,
              "limit_vram_mib": 0}
    return kind(**{f: values.get(f, v) for f, v in fields.items()})


def test_a_decision_batch_anywhere_but_the_decision_subject_is_refused():
    empty = ev.DecisionBatch(decisions=[])
    assert authority.admits(subjects.DECISIONS, empty)
    for subject in ("gpu.evt.claim.x", "gpu.evt.decision.x", "gpu.evt.node.n0", subjects.INTAKE_BATCHES):
        assert not authority.admits(subject, empty), subject


def test_node_events_only_on_that_nodes_own_subject():
    node = h100_node("n0")
    assert authority.admits(subjects.node("n0"), node)
    assert not authority.admits(subjects.node("n1"), node)
    assert not authority.admits(subjects.node("n0") + ".bound", node)
    assert not authority.admits(subjects.claim("n0"), node)
    beat = ev.NodeHeartbeat(node="n0")
    assert authority.admits(subjects.node("n0"), beat)
    assert not authority.admits(subjects.node("n00"), beat)
    assert not authority.admits(subjects.device_marks("n0"), beat)


def test_bindings_only_on_the_nodes_binding_subject():
    bound = ev.ClaimBound(claim_id="c", node="n0", env={})
    assert authority.admits(subjects.node_bindings("n0"), bound)
    assert not authority.admits(subjects.node("n0"), bound)
    assert not authority.admits(subjects.node_bindings("n1"), bound)
    assert not authority.admits(subjects.claim("c"), bound)


def test_an_event_batch_is_admitted_only_if_every_member_is():
    mine = ev.ClaimBound(claim_id="c", node="n0", env={})
    other = ev.ClaimBound(claim_id="d", node="n1", env={})
    assert authority.admits(subjects.node_bindings("n0"), ev.EventBatch(events=[mine]))
    assert not authority.admits(subjects.node_bindings("n0"), ev.EventBatch(events=[mine, other]))
    submit = ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c", namespace="a"))
    assert authority.admits(subjects.INTAKE_BATCHES, ev.EventBatch(events=[submit]))
    assert not authority.admits(subjects.INTAKE_BATCHES, ev.EventBatch(events=[submit, mine]))
    assert not authority.admits(subjects.node_bindings("n0"), ev.EventBatch(events=[submit]))


def test_claim_events_name_the_claim_of_their_subject():
    release = ev.ClaimReleased(claim_id="c-1")
    assert authority.admits(subjects.claim("c-1"), release)
    assert not authority.admits(subjects.claim("c-2"), release)
    submit = ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c-1", namespace="a"))
    assert authority.admits(subjects.claim("c-1"), submit)
    assert not authority.admits(subjects.claim("c-2"), submit)
    assert not authority.admits(subjects.claim("c-1"), ev.ClaimRejected(claim_id="", code="invalid"))


def test_quota_events_only_on_their_namespaces_quota_subject():
    quota = ev.QuotaSet(namespace="team-a", spec=QuotaSpec())
    assert authority.admits(subjects.quota("team-a"), quota)
    assert not authority.admits(subjects.quota("team-b"), quota)
    assert not authority.admits(subjects.claim("team-a"), quota)
    assert not authority.admits(subjects.DEFAULT_QUOTA, quota)
    assert authority.admits(subjects.DEFAULT_QUOTA, ev.QuotaDefaultSet(spec=QuotaSpec()))
    assert not authority.admits(subjects.quota("team-a"), ev.QuotaDefaultSet(spec=QuotaSpec()))


def test_a_fleet_speaks_only_for_its_own_nodes():
    assert authority.admits(subjects.fleet("live-"), ev.NodeHeartbeat(node="live-n1"))
    assert not authority.admits(subjects.fleet("live-"), ev.NodeHeartbeat(node="n1"))
    assert not authority.admits(subjects.fleet("live-"), h100_node("live-n1"))  # registers on its own subject


def test_dead_letters_are_never_folded_and_not_counted_as_forged():
    rejected = ev.ClaimRejected(claim_id="c", code="invalid")
    assert not authority.admits(subjects.DEAD_LETTER + ".intake", rejected)
    assert not authority.folded(subjects.DEAD_LETTER + ".intake")
    assert authority.folded(subjects.claim("c"))


def test_subject_tokens_of_odd_ids_match_the_writers_rewrite():
    release = ev.ClaimReleased(claim_id="col.a")
    assert authority.admits(subjects.claim("col.a"), release)  # gpu.evt.claim.col_a
    allocated = ev.ClaimAllocated(claim_id="c", namespace="a", node="n0",
                                  grants=[Grant(node="n0", uuid="GPU-0", index=0)])
    assert not authority.admits(subjects.claim("c"), allocated)


def test_every_event_is_admitted_on_its_home_subject():
    examples = [h100_node("n0"), ev.ClaimBound(claim_id="c", node="n0", env={}),
                ev.QuotaSet(namespace="a", spec=QuotaSpec()), ev.QuotaDefaultDeleted(),
                ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c.1", namespace="a")),
                ev.DriftCleared(node="n0", kind="x"), ev.DecisionBatch(decisions=[])]
    for event in examples:
        assert authority.admits(authority.home_subject(event), event), event
