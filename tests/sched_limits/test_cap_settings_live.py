"""The fleet default, live: `gpuledger pool defaults --max-claims-per-node 2` below what a node
holds evicts nothing; the allocator keeps a new claim off the node (`node-claims-full`), and
`claim explain` (the claim service's fold) and `gpuledger state at` (the CLI's) show the node over
its cap, as every fold reads the same FleetDefaultsSet."""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest

from schemas import subjects
from shared.jetstream import JetStreamEventLog, ensure_streams
from tests.cli import run_cli
from tests.service.helpers import h100_node, register_nodes, running

pytestmark = pytest.mark.timeout(600)


async def _until(check, what: str, tries: int = 3000) -> None:
    for _ in range(tries):  # 5 minutes: a full suite's load
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(what)


async def test_a_lowered_fleet_default_keeps_claims_and_shows_the_node_over_its_cap(fresh_nats):
    url = fresh_nats.url
    nc = await nats.connect(url)
    await ensure_streams(nc.jetstream())
    try:
        async with running(url, "claim", "allocator", "pool-controller") as (_claim, allocator, _pools):
            await register_nodes(JetStreamEventLog(nc), h100_node("node-a"))
            state = allocator.allocator.state
            for i in range(4):
                done = await run_cli("claim", "submit", "-n", "team-a", "--id", f"c{i}", "--gpus", "1",
                                     "--nats-url", url)
                assert done.returncode == 0, done.stderr

            async def all_placed() -> bool:
                return all(state.claims.get(f"c{i}") is not None and state.claims[f"c{i}"].status == "allocated"
                           for i in range(4))

            await _until(all_placed, "the four claims were not placed")
            lowered = await run_cli("pool", "defaults", "--max-claims-per-node", "2", "--nats-url", url)
            assert lowered.returncode == 0 and "max claims per node: 2" in lowered.stdout, lowered.stderr
            done = await run_cli("claim", "submit", "-n", "team-a", "--id", "late", "--gpus", "1", "--nats-url", url)
            assert done.returncode == 0, done.stderr

            async def late_waits() -> bool:
                late = state.claims.get("late")
                return late is not None and bool(late.reasons)

            await _until(late_waits, "the late claim was not decided")
            assert state.claims["late"].reasons[0].code == "node-claims-full"
            assert {state.claims[f"c{i}"].status for i in range(4)} == {"allocated"}  # nothing evicted

            async def explained() -> bool:
                shown = await run_cli("claim", "explain", "c0", "--nats-url", url)
                return "over its cap of 2 (the fleet default" in shown.stdout

            await _until(explained, "claim explain does not show node-a over its cap")
            at = await run_cli("state", "at", "--time", str(time.time() + 1), "--json", "--nats-url", url)
            assert at.returncode == 0, at.stderr
            [node] = json.loads(at.stdout)["nodes"]
            assert (node["claims"], node["max_claims"], node["over_cap"]) == (4, 2, True)
    finally:
        await nc.close()
