"""`bench e2e` on the real stack (gpuledger up --demo, as a user starts it), under a load of
claims released as soon as they are allocated: nothing lost, nothing double-booked, and no node
agent binds what the fold does not back or leaves a workload running."""

import pytest

from bench.e2e.run import Options, run_on_new_stack


@pytest.mark.e2e
@pytest.mark.timeout(300)
async def test_claims_through_the_whole_stack_are_decided_once_and_bound_only_when_live():
    options = Options(claims=400, rate=200.0, nodes=4, drain_s=120.0, idle_s=0.0)
    (result,) = await run_on_new_stack(options, [(options.rate, options.claims)])
    assert result["claims"] == 400 and result["publish_failed"] == 0
    assert result["lost"] == 0 and result["allocated"] == 400, result
    assert result["double_booked"] == 0 and result["void_allocations"] == 0, result
    assert (result["bound_void"], result["bound_foreign"], result["bound_twice"]) == (0, 0, 0), result
    assert result["leftover_workloads"] == 0, result
    assert result["agent_restarts"] == 0 and result["release_errors"] == 0, result
    assert result["cpu_ms_per_claim"]["total"] > 0 and "nats-server" in result["cpu_ms_per_claim"]
    # every allocated claim's latency split into its hops (bench/e2e/hops.py)
    assert all(result["hops_ms"][hop]["claims"] == 400 for hop in ("intake", "to_pass", "pass_to_seen")), result
    # ... and in five with the times nats-server stored its messages, every claim in one of them
    assert all(hop["claims"] == 400 for hop in result["hops_stored_ms"].values()), result
    assert result["batches"]["claims_per_intake_message"]["claims"] == 400, result
    assert result["batches"]["claims_per_decision_batch"]["claims"] == 400, result
