"""The chaos checker's own fold, on small hand-made logs: each counter stays at zero on a clean
log and goes up on the one fault it is there to catch."""

import msgspec
import pytest

from bench.chaos.checker import ChaosCheck
from bench.chaos.timeline import Fault, gaps, stall_figures, waiting_spans
from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec, Grant

NODE = "n0"


def submitted(claim_id: str, at: float = 0.0, **spec) -> tuple[str, bytes]:
    event = ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace="ns", **spec), at=at)
    return subjects.claim(claim_id), ev.encode_event(event)


def allocated(claim_id: str, *cards: int, milli: int = 1000, node: str = NODE) -> ev.ClaimAllocated:
    grants = [Grant(node=node, uuid=f"GPU-{node}-{c}", index=c, milli=milli) for c in cards]
    return ev.ClaimAllocated(claim_id=claim_id, namespace="ns", node=node, grants=grants)


def decisions(*members, at: float = 0.0, subject: str = subjects.DECISIONS) -> tuple[str, bytes]:
    return subject, ev.encode_event(ev.DecisionBatch(decisions=list(members), at=at))


def released(claim_id: str) -> tuple[str, bytes]:
    return subjects.claim(claim_id), ev.encode_event(ev.ClaimReleased(claim_id=claim_id))


def rejected(claim_id: str, subject: str = "") -> tuple[str, bytes]:
    event = ev.ClaimRejected(claim_id=claim_id, code="conflict")
    return subject or subjects.claim(claim_id), ev.encode_event(event)


def bound(claim_id: str, *cards: int, node: str = NODE) -> tuple[str, bytes]:
    env = {"NVIDIA_VISIBLE_DEVICES": ",".join(f"GPU-{node}-{c}" for c in cards)}
    return f"gpu.evt.node.{node}.bound", ev.encode_event(ev.ClaimBound(claim_id=claim_id, node=node, env=env))


def check(*messages, accepted=()) -> dict:
    checker = ChaosCheck(accepted=set(accepted))
    checker.fold((seq, subject, data) for seq, (subject, data) in enumerate(messages, 1))
    return checker.figures()


CLEAN = [submitted("a"), submitted("b"), decisions(allocated("a", 0), allocated("b", 1, milli=500)),
         bound("a", 0), bound("b", 1), released("a"), submitted("c"),
         decisions(allocated("c", 0)), bound("c", 0)]

ZEROS = {"lost": 0, "duplicated": 0, "double_booked": 0, "bound_void": 0, "clobbered": 0,
         "undecodable": 0, "forged_stored": 0}


def test_a_clean_log_counts_nothing():
    figures = check(*CLEAN, accepted={"a", "b", "c"})
    assert {k: figures[k] for k in ZEROS} == ZEROS and figures["accepted"] == 3


@pytest.mark.parametrize("name, extra, counter, expected", [
    ("acknowledged but never submitted", [], "lost", 1),
    ("submitted, never decided", [submitted("d")], "lost", 1),
    ("submitted twice", [submitted("a")], "duplicated", 1),
    ("allocated again while it holds", [decisions(allocated("c", 3))], "duplicated", 1),
    ("a whole card granted twice", [submitted("d"), decisions(allocated("d", 0))], "double_booked", 1),
    ("halves over capacity", [submitted("d"), decisions(allocated("d", 1, milli=600))], "double_booked", 1),
    ("binding of a claim never allocated", [bound("d", 5)], "bound_void", 1),
    ("binding after the release", [bound("a", 0)], "bound_void", 1),
    ("binding on devices not granted", [bound("c", 4)], "bound_void", 1),
    ("binding on another node", [bound("c", 0, node="n9")], "bound_void", 1),
    ("a resubmit's refusal ends the claim", [rejected("c")], "clobbered", 1),
    ("bytes no event decodes", [("gpu.evt.claim.x", b"\xff\xfe{")], "undecodable", 1),
    ("a decision forged on a claim subject", [decisions(allocated("d", 7), subject="gpu.evt.claim.d")],
     "forged_stored", 1),
    ("a submit forged on another subject", [("gpu.evt.node.n0", submitted("e")[1])], "forged_stored", 1),
])
def test_each_fault_is_counted(name, extra, counter, expected):
    accepted = {"a", "b", "c"} | ({"zz"} if name.startswith("acknowledged") else set())
    figures = check(*CLEAN, *extra, accepted=accepted)
    assert figures[counter] == expected, (name, figures)
    others = {k: v for k, v in ZEROS.items() if k != counter}
    if counter == "lost" or counter == "forged_stored":
        others.pop("lost", None)
    assert {k: figures[k] for k in others} == others, (name, figures)


def test_a_forged_allocation_takes_no_device_and_its_binding_is_void():
    figures = check(*CLEAN, submitted("d"), decisions(allocated("d", 0), subject="gpu.evt.claim.d"),
                    bound("d", 0))
    assert (figures["forged_stored"], figures["double_booked"], figures["bound_void"]) == (1, 0, 1)
    assert figures["lost"] == 1  # d was submitted; only the forged message "decided" it


def test_a_claim_released_before_any_decision_is_not_lost_and_a_dead_letter_copy_is_not_a_fact():
    figures = check(submitted("a"), released("a"), submitted("b"), rejected("b", subjects.DEAD_LETTER + ".intake"),
                    decisions(allocated("b", 0)))
    assert (figures["lost"], figures["clobbered"]) == (0, 0)


def test_claims_submitted_in_an_intake_batch_are_claims():
    batch = ev.EventBatch(events=[ev.ClaimSubmitted(claim=ClaimSpec(claim_id=c, namespace="ns"))
                                  for c in ("x", "y")])
    figures = check((subjects.INTAKE_BATCHES, msgspec.json.encode(batch)), decisions(allocated("x", 0)))
    assert (figures["accepted"], figures["lost"], figures["forged_stored"]) == (2, 1, 0)


# --- stalls and recoveries -----------------------------------------------------------------------

def test_gaps_are_only_counted_while_claims_wait():
    spans = waiting_spans({"a": 0.0, "b": 10.0}, {"a": 3.0, "b": 11.0}, end=20.0)
    assert spans == [(0.0, 3.0), (10.0, 11.0)]
    assert gaps(spans, [1.0, 3.0, 10.5]) == [(0.0, 1.0), (1.0, 3.0), (10.0, 10.5), (10.5, 11.0)]


def test_a_pause_no_fault_explains_is_a_stall_and_one_after_a_fault_is_its_recovery():
    waiting = {f"c{i}": float(i) for i in range(20)}
    settled = {f"c{i}": float(i) + 0.5 for i in range(20)}
    settled |= {f"c{i}": 9.0 for i in range(5, 9)}  # nothing decided 4.5-9 (a kill at 5.2)
    settled |= {f"c{i}": 16.5 for i in range(12, 16)}  # nor 12-16.5 while c12 waits (no fault)
    decided = sorted(set(settled.values()))
    figures = stall_figures(waiting, settled, decided, [Fault("kill allocator", 5.2, 5.2)], end=20.0)
    assert figures["recovery_s"] == {"kill allocator": pytest.approx(3.8)}
    assert figures["stalled_s"] == pytest.approx(4.5) and figures["longest_gap_s"] == pytest.approx(4.5)
    quiet = stall_figures(waiting, settled, decided, [Fault("a", 5.2, 5.2), Fault("b", 11.6, 11.6)], 20.0)
    assert quiet["stalled_s"] == 0.0


def test_a_fault_never_recovered_from_has_no_recovery_time():
    figures = stall_figures({"a": 0.0}, {}, [0.1], [Fault("nats 60s", 1.0, 61.0)], end=100.0)
    assert figures["recovery_s"] == {"nats 60s": None} and figures["stalled_s"] == 0.0
