"""Two real allocator processes on one real nats-server: no device is ever granted twice."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import msgspec
import nats
import pytest

from schemas import events as ev
from schemas import subjects
from ledger.evolve import fold
from shared.jetstream import JetStreamEventLog, ensure_streams
from tests.service.helpers import h100_node, register_nodes, request, running


def start_allocator(url: str, tmp_path, name: str) -> subprocess.Popen:
    env = dict(os.environ, GPULEDGER_NATS_URL=url, GPULEDGER_TICK_S="0.05",
               GPULEDGER_NODE_TIMEOUT_S="3600", GPULEDGER_DATA_DIR=str(tmp_path))
    log = open(tmp_path / f"{name}.log", "wb")
    return subprocess.Popen([sys.executable, "-m", "gpuledger_cli.main", "service", "allocator"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)


async def wait_allocated(nc, count: int, timeout: float = 60.0) -> dict:
    deadline = asyncio.get_running_loop().time() + timeout
    summary = {}
    while asyncio.get_running_loop().time() < deadline:
        summary = (await request(nc, subjects.query("cluster.summary"), {}))["data"]
        if summary["claims"].get("allocated", 0) >= count and not summary["pending"] > 1000:
            return summary
        await asyncio.sleep(0.2)
    return summary


@pytest.mark.timeout(180)
async def test_two_allocator_processes_never_grant_a_device_twice(fresh_nats, tmp_path):
    nc = await nats.connect(fresh_nats.url)
    await ensure_streams(nc.jetstream())
    log = JetStreamEventLog(nc)
    await register_nodes(log, *(h100_node(f"n{i}") for i in range(4)))  # 32 GPUs
    procs = [start_allocator(fresh_nats.url, tmp_path, f"alloc{i}") for i in range(2)]
    try:
        async with running(fresh_nats.url, "claim"):
            js = nc.jetstream()
            for wave in range(3):
                for i in range(40):
                    spec = {"claim_id": f"w{wave}-{i}", "namespace": "race", "gpus": 1 + (i % 3)}
                    await js.publish(subjects.INTAKE_CLAIMS, msgspec.json.encode(spec))
                await asyncio.sleep(1.0)
                for i in range(0, 40, 4):  # release some so both allocators keep deciding
                    await request(nc, subjects.command("claim.release"), {"claim_id": f"w{wave}-{i}"})
            await asyncio.sleep(3.0)
            summary = await wait_allocated(nc, 1)
        events = [(s.seq, s.event) async for s in log.read()]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
        await nc.close()
    state = fold(events)
    holders = [(u.uuid, len(u.holders)) for u in state.units.values()]
    assert all(n <= 1 for _, n in holders), "a device is held by two whole-GPU claims"
    batches = [e for _, e in events if isinstance(e, ev.DecisionBatch)]
    allocations = [d for b in batches for d in b.decisions if isinstance(d, ev.ClaimAllocated)]
    granted = {d.claim_id for d in allocations}
    assert len(allocations) == len(granted), "a claim was allocated twice"
    for d in allocations:  # every allocation in the log took effect: none was void
        assert state.claims[d.claim_id].status in ("allocated", "released"), d.claim_id
    assert summary["claims"].get("allocated", 0) > 0
    writers = {b.allocator for b in batches}
    assert writers, "no decisions were made"
