"""`bench e2e` splits each claim's latency into three hops from stamps the log holds: publish ->
validated (ClaimSubmitted.at), validated -> its decision pass began (ClaimAllocated.at), pass ->
seen by the benchmark; claims of other runs, repeats and claims missing a stamp are left out. With
the times nats-server stored its messages, into five (the appends' own share), and it says how many
claims each stored intake message and decision batch carried."""

from __future__ import annotations

from bench.e2e.hops import HopTimes, stored_times
from schemas import subjects
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


def test_five_hops_from_the_times_messages_were_stored():
    hops = HopTimes("run-")
    hops.observe(ev.EventBatch(events=[claim("run-1", at=10.004), claim("run-2", at=10.010),
                                       claim("other-1", at=10.0)], at=10.01), seq=7)
    hops.observe(claim("run-3", at=10.02), seq=8)
    hops.observe(claim("run-1", at=99.0), seq=9)  # a repeat stored later: the first submit is the claim
    hops.observe(ev.DecisionBatch(decisions=[_allocated("run-1", 10.015), _allocated("run-2", 10.015),
                                             _allocated("other-1", 10.0)], at=10.015), seq=11)
    hops.observe(ev.DecisionBatch(decisions=[_allocated("run-3", 10.030)], at=10.030), seq=12)
    stored_at = {7: 10.012, 8: 10.022, 9: 99.1, 11: 10.020, 12: 10.031}
    published = {"run-1": 10.001, "run-2": 10.002, "run-3": 10.019}
    seen = {"run-1": 10.025, "run-2": 10.026, "run-3": 10.040}
    got = hops.stored_hops_ms(published, seen, stored_at)
    assert {hop: got[hop]["claims"] for hop in got} == {hop: 3 for hop in got}
    assert got["validated_to_stored"]["p50"] == 2.0  # run-1 8, run-2 2, run-3 2 (ms)
    assert got["stored_to_pass"]["p99"] == 8.0  # run-3: 10.022 -> 10.030
    assert got["pass_to_stored"]["p50"] == 5.0  # 5, 5 and 1 ms
    # each claim's five hops add up to the latency the benchmark measures
    claim_1 = (10.004 - 10.001) + (10.012 - 10.004) + (10.015 - 10.012) + (10.020 - 10.015) + (10.025 - 10.020)
    assert round(claim_1, 9) == round(seen["run-1"] - published["run-1"], 9)
    # a claim whose message has no stored time (not read) is left out, not counted as zero
    assert hops.stored_hops_ms(published, seen, {7: 10.012, 11: 10.020})["stored_to_seen"]["claims"] == 2


def test_batch_sizes_count_the_runs_claims_per_stored_message():
    hops = HopTimes("run-")
    hops.observe(ev.EventBatch(events=[claim("run-1"), claim("run-2"), claim("other-1")], at=1.0), seq=3)
    hops.observe(claim("run-3"), seq=4)
    hops.observe(ev.DecisionBatch(decisions=[_allocated("run-1", 2.0), _allocated("run-2", 2.0),
                                             _allocated("run-3", 2.0)], at=2.0), seq=5)
    assert hops.batches() == {
        "claims_per_intake_message": {"messages": 2, "claims": 3, "mean": 1.5, "p50": 2, "p90": 2, "max": 2},
        "claims_per_decision_batch": {"messages": 1, "claims": 3, "mean": 3.0, "p50": 3, "p90": 3, "max": 3}}
    assert HopTimes("x-").batches() == {"claims_per_intake_message": {"messages": 0},
                                        "claims_per_decision_batch": {"messages": 0}}


async def test_stored_times_are_the_servers_own(fresh_client):
    js = fresh_client.jetstream()
    seqs = [(await js.publish(subjects.claim(f"c{i}"), b"{}")).seq for i in range(5)]
    got = await stored_times(fresh_client, subjects.STREAM, subjects.EVENTS, seqs[1], seqs[3])
    assert sorted(got) == seqs[1:4]
    for seq in seqs[1:4]:  # what a direct read of the message says nats-server stored it at
        assert abs(got[seq] - (await js.get_msg(subjects.STREAM, seq)).time.timestamp()) < 2e-6
    assert await stored_times(fresh_client, subjects.STREAM, subjects.EVENTS, 9, 8) == {}
