"""A NATS outage under a running stack: nothing exits, nothing is lost, claims submitted before,
during (the client retries) and after are all decided, and bound claims are not declared lost
because their nodes could not be heard while NATS was away.

The outage here is a few seconds with the node timeout shortened to 2 s, so silence and publish
timeouts both happen inside it; GPULEDGER_SLOW_TESTS=1 runs the 60 s outage of issue 16."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from shared.natsserver import free_port, start_nats_server
from tests.trust_edge.outage import UpProcess, outcomes, submit_in_background, submit_retrying

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]
SHORT_OUTAGE_S = 7.0  # past the 5 s publish timeout and the 2 s node timeout below


def _ride_out(tmp_path, outage_s: float) -> dict:
    port = free_port()
    server = start_nats_server(tmp_path / "nats", port)
    stack = UpProcess("--nats-url", server.url, "--demo", "--fleet", "2xH100x8", "--no-dashboard",
                      "--data-dir", str(tmp_path / "data"), last="GPULEDGER_NATS_URL",
                      env={"GPULEDGER_NODE_TIMEOUT_S": "2", "GPULEDGER_HEARTBEAT_S": "0.5"})
    try:
        before = [f"before-{i}" for i in range(3)]
        asyncio.run(submit_retrying(server.url, before))
        assert set(asyncio.run(outcomes(server.url, before)).values()) == {"bound"}
        server.process.kill()
        server.process.wait()
        during = [f"during-{i}" for i in range(3)]
        client = submit_in_background(server.url, during)
        time.sleep(outage_s)  # the outage itself: nothing is asserted on how long anything takes
        server = start_nats_server(tmp_path / "nats", port)
        back = time.monotonic()
        client.join(120)
        after = [f"after-{i}" for i in range(3)]
        asyncio.run(submit_retrying(server.url, after))
        got = asyncio.run(outcomes(server.url, before + during + after))
        # reported, never asserted: from the server's restart to every claim bound (load-dependent)
        print(f"outage {outage_s:g} s: every claim bound {time.monotonic() - back:.1f} s after the restart")
        return {"outcomes": got, "said": list(stack.said), "alive": stack.proc.poll() is None}
    finally:
        stack.stop()
        server.stop()


def _check(result: dict) -> None:
    assert set(result["outcomes"].values()) == {"bound"}, result["outcomes"]
    assert result["alive"]
    died = [line for line in result["said"] if "exited" in line or "killed" in line or "restarting" in line]
    assert died == [], died


def test_a_short_nats_outage_loses_nothing_and_kills_no_one(tmp_path):
    _check(_ride_out(tmp_path, SHORT_OUTAGE_S))


@pytest.mark.skipif(os.environ.get("GPULEDGER_SLOW_TESTS") != "1", reason="the 60 s outage: GPULEDGER_SLOW_TESTS=1")
def test_a_60s_nats_outage_loses_nothing_and_kills_no_one(tmp_path):
    _check(_ride_out(tmp_path, 60.0))
