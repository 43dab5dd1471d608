"""`bench e2e` says where its slowest claims' time went: each hop's mean over the claims at or past
the p99 beside its mean over all (bench/e2e/hops.py `HopTimes.tail`), how they bunch in publish
time, and which process waited for a CPU in the sampled intervals they passed through
(bench/e2e/cpu.py `waits_between`)."""

from __future__ import annotations

import pytest

from bench.e2e.cpu import waits_between
from bench.e2e.hops import STORED_HOPS, HopTimes
from bench.e2e.report import tail_table
from bench.e2e.run import published_late
from schemas import events as ev
from schemas.types import ClaimSpec


def _run(slow: set[int], count: int = 200) -> tuple[HopTimes, dict, dict, dict]:
    """`count` claims 10 ms apart, each 5 ms end to end; those in `slow` spend 40 ms more between
    their ClaimSubmitted stored and their pass (the allocator's read)."""
    hops = HopTimes("run-")
    published, seen, stored_at = {}, {}, {}
    for i in range(count):
        claim_id, at = f"run-{i}", 100.0 + i * 0.01
        late = 0.04 if i in slow else 0.0
        hops.observe(ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace="ns"), at=at + 0.001),
                     seq=2 * i + 1)
        hops.observe(ev.DecisionBatch(decisions=[ev.ClaimAllocated(claim_id=claim_id, namespace="ns", node="n",
                                                                   at=at + 0.003 + late)], at=at + 0.003 + late),
                     seq=2 * i + 2)
        published[claim_id], seen[claim_id] = at, at + 0.005 + late
        stored_at[2 * i + 1], stored_at[2 * i + 2] = at + 0.002, at + 0.004 + late
    return hops, published, seen, stored_at


def test_the_slowest_claims_hops_beside_every_claims():
    hops, published, seen, stored_at = _run(slow={50, 51, 150})
    tail = hops.tail(published, seen, stored_at)
    assert tail["claims"] == 3 and tail["threshold_ms"] == pytest.approx(45.0)
    assert list(tail["hops_ms"]) == list(STORED_HOPS)
    assert tail["hops_ms"]["stored_to_pass"]["tail"] == pytest.approx(41.0)  # 1 ms + the 40 late
    assert tail["hops_ms"]["stored_to_pass"]["all"] == pytest.approx(1.0 + 40 * 3 / 200)
    assert tail["hops_ms"]["publish_to_validated"] == {"tail": pytest.approx(1.0), "all": pytest.approx(1.0)}
    # 50 and 51 published 10 ms apart: one window of 100 ms; 150 another
    assert tail["windows"] == 2 and tail["largest_window"] == {"at_s": 0.5, "claims": 2}
    spans = [at for span in sorted(tail["spans"]) for at in span]
    assert spans == pytest.approx([100.5, 100.545, 100.51, 100.555, 101.5, 101.545])
    assert sorted(tail["ids"]) == ["run-150", "run-50", "run-51"]
    assert "| stored_to_pass | 41.0 |" in tail_table(tail, {})


def test_how_late_the_slowest_claims_went_out():
    late = {"c1": 0.0, "c2": 0.002, "c3": 0.020, "c4": 0.018}
    assert published_late(late, ["c3", "c4"]) == {"tail": 19.0, "all": 10.0}
    assert published_late({}, []) == {"tail": 0.0, "all": 0.0}
    row = tail_table({"claims": 2, "threshold_ms": 50.0, "windows": 1, "window_s": 0.1, "hops_ms": {},
                      "largest_window": {"at_s": 1.4, "claims": 2}, "published_late_ms": {"tail": 19.0, "all": 10.0}},
                     {})
    assert "| published after its time (the publisher behind) | 19.0 | 10.0 |" in row


def test_no_claim_with_every_stamp_is_no_tail():
    assert HopTimes("run-").tail({"run-1": 1.0}, {"run-1": 2.0}, {}) == {"claims": 0}


def test_which_process_waited_while_the_slowest_claims_passed():
    history = [(0.0, {"allocator": 0.0, "claim": 0.0}),
               (1.0, {"allocator": 0.01, "claim": 0.01}),
               (2.0, {"allocator": 0.11, "claim": 0.02}),  # the allocator waited 100 ms in this second
               (3.0, {"allocator": 0.12, "claim": 0.03})]
    waits = waits_between(history, [(1.4, 1.45)])
    assert waits["allocator"] == {"tail": pytest.approx(100.0), "all": pytest.approx(40.0)}
    assert waits["claim"] == {"tail": pytest.approx(10.0), "all": pytest.approx(10.0)}
    assert "| allocator | 100.0 | 40.0 |" in tail_table({"claims": 1, "threshold_ms": 50.0, "windows": 1,
                                                           "window_s": 0.1, "hops_ms": {},
                                                           "largest_window": {"at_s": 1.4, "claims": 1}}, waits)
