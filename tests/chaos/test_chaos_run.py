"""`bench chaos` on the real stack (gpuledger up --demo, as a user starts it): a short run with one
service killed mid-burst and identical resubmits mixed in; the independent checker finds nothing
lost, duplicated, double-booked or bound void, no stall the fault does not explain, and decisions
back after the kill."""

import json
import os

import pytest

from bench.chaos.run import Options, run_chaos


@pytest.mark.e2e
@pytest.mark.timeout(600)
async def test_a_short_chaos_run_with_the_allocator_killed_loses_nothing(tmp_path):
    # claims held a second: a binding lands before its release (the release-before-binding race
    # is measured by the benchmark, not asserted here)
    options = Options(claims=150, rate=50.0, nodes=4, hold_s=1.0, faults=("allocator",),
                      resubmit_share=0.05, conflicting=False, fuzz=False, forge=False, drain_s=120.0,
                      data_dir=str(tmp_path / "stack"))  # kept by pytest: the logs of a failure
    result = await run_chaos(options)
    assert result["accepted"] == 150 and result["drained"], json.dumps(result)
    zeros = {k: result[k] for k in ("lost", "duplicated", "double_booked", "bound_void", "stalled",
                                    "clobbered", "undecodable_stored")}
    assert zeros == dict.fromkeys(zeros, 0), json.dumps(result)
    (recovery,) = result["recovery_s"].values()
    assert recovery is not None and recovery < 120, result  # came back (the figure is in the report)
    assert result["restarts"] == {"allocator": 1}, result


# Fails on main (2026-11-23, after the credentials fix): the claim service and the allocator die
# on the 503 / timeout they get while the stream elects a leader; `up` restarts them and nothing
# is lost, but decisions pause again (stalled 2.7 s). Services riding out an election is issue
# 16.7 (trust-edge). Run it with GPULEDGER_CHAOS_STRICT=1; it joins the default suite when that
# lands (docs/reliability.md).
@pytest.mark.skipif(os.environ.get("GPULEDGER_CHAOS_STRICT") != "1",
                    reason="known gap, issue 16.7: set GPULEDGER_CHAOS_STRICT=1 to run it")
@pytest.mark.e2e
@pytest.mark.timeout(600)
async def test_killing_the_log_leader_of_a_three_server_cluster_mid_burst_loses_nothing(tmp_path):
    options = Options(claims=150, rate=50.0, nodes=4, hold_s=1.0, faults=("nats-3s",), cluster=3,
                      resubmit_share=0.0, conflicting=False, fuzz=False, forge=False, drain_s=120.0,
                      data_dir=str(tmp_path / "stack"))  # kept by pytest: the logs of a failure
    result = await run_chaos(options)
    assert result["accepted"] == 150 and result["drained"], json.dumps(result)
    assert "the log's leader of 3" in result["faults"][0], result
    zeros = {k: result[k] for k in ("lost", "duplicated", "double_booked", "bound_void", "stalled")}
    assert zeros == dict.fromkeys(zeros, 0), json.dumps(result)
    (recovery,) = result["recovery_s"].values()
    print("decisions back after the leader's kill:", recovery, "s")
    assert recovery is not None and recovery < 120, result  # the figure goes to docs/reliability.md
