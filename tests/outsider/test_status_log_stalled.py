"""`gpuledger status` on a stack that cannot write: with nats-server's disk full (session 30, `up`
on a 12 MB tmpfs) every append timed out for good, and status showed every service `up` and
`0 behind` (the log did not move, so nobody was behind it) and exited 0. Ready nodes heartbeat
into the log, and silent ones are declared lost there, so a log that stored nothing for twice the
node timeout while the claim service counts nodes ready is a stack that cannot write: status says
so and exits 1. Here the log is made idle by running no agent and no allocator, which status
cannot tell from a full disk (nor need to: either way nothing is decided)."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import nats

from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes, request, running
from tests.waiting import until


async def _status(url: str, node_timeout_s: str) -> tuple[int, dict, str]:
    env = {**os.environ, "GPULEDGER_NODE_TIMEOUT_S": node_timeout_s}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuledger_cli.main", "status", "--json", "--nats-url", url, "--timeout", "5",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode, json.loads(out), err.decode()


async def test_a_log_idle_while_nodes_are_ready_is_reported(fresh_nats):
    async with running(fresh_nats.url, "claim"):
        nc = await nats.connect(fresh_nats.url)
        try:
            await register_nodes(JetStreamEventLog(nc), h100_node("quiet-node"))

            async def ready():
                summary = await request(nc, "gpu.qry.cluster.summary", {})
                return summary["ok"] and summary["data"]["nodes_ready"] == 1

            assert await until(ready)
            code, report, err = await _status(fresh_nats.url, "3600")  # idle far below 2 h
            assert report["log_stalled"] is None and "not moving" not in err
            await asyncio.sleep(1.5)  # the log idle past 2 x 0.5 s
            code, report, err = await _status(fresh_nats.url, "0.5")
            assert code == 1
            assert report["log_stalled"]["nodes_ready"] == 1 and report["log_idle_s"] > 1.0
            assert "the log is not moving: nothing stored for" in err and "a full disk?" in err
        finally:
            await nc.close()
