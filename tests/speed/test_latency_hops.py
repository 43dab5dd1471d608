"""`bench e2e` splits each claim's latency into three hops from stamps the log holds: publish ->
validated (ClaimSubmitted.at), validated -> its decision pass began (ClaimAllocated.at), pass ->
seen by the benchmark; claims of other runs, repeats and claims missing a stamp are left out."""

from __future__ import annotations

from bench.e2e.hops import HopTimes
from schemas import events as ev
from tests.quota.builders import claim


def _allocated(claim_id: str, at: float) -> ev.ClaimAllocated:
    return ev.ClaimAllocated(claim_id=claim_id, namespace="team-a", node="n1", at=at)


def test_each_hop_from_the_stamps_the_log_holds():
    hops = HopTimes("run-")
    hops.observe(ev.EventBatch(events=[claim("run-1", at=10.004), claim("run-2", at=10.010),
                                       claim("other-1", at=10.0)], at=10.01))
    hops.observe(claim("run-1", at=99.0))  # a repeat stored later: the first submit is the claim
    hops.observe(ev.DecisionBatch(decisions=[_allocated("run-1", 10.006), _allocated("run-2", 10.020),
                                             _allocated("other-1", 10.0)], at=10.006))
    hops.observe(claim("run-3", at=10.5))  # never allocated: no pass stamp
    published = {"run-1": 10.001, "run-2": 10.002, "run-3": 10.4}
    seen = {"run-1": 10.009, "run-2": 10.030}
    got = hops.hops_ms(published, seen)
    assert got["intake"] == {"claims": 2, "p50": 8.0, "p90": 8.0, "p99": 8.0}
    assert got["to_pass"]["claims"] == 2 and got["to_pass"]["p50"] == 10.0
    assert got["pass_to_seen"]["p50"] == 10.0 and got["pass_to_seen"]["p99"] == 10.0
    # the hops add up to the latency the benchmark measures, claim by claim
    assert round(3.0 + 2.0 + 3.0, 6) == round(1000 * (seen["run-1"] - published["run-1"]), 6)


def test_no_claims_no_quantiles():
    assert HopTimes("x-").hops_ms({}, {}) == {hop: {"claims": 0} for hop in ("intake", "to_pass", "pass_to_seen")}
