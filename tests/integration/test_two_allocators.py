"""Two real allocator processes on one real nats-server: both decide, their appends conflict and
the one fenced out catches up and decides again, and no device is ever granted twice (every
allocation in the log took effect: none was voided by the fold's own double-grant check)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
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


def fenced_out(tmp_path) -> int:
    """Appends refused by the fence (another allocator decided first), from both allocators' logs."""
    return sum((tmp_path / f"alloc{i}.log").read_text(errors="replace").count("decision fenced out")
               for i in range(2))


async def wave(nc, js, number: int) -> None:
    """A burst both allocators see at once, then releases so both keep deciding."""
    for i in range(40):
        spec = {"claim_id": f"w{number}-{i}", "namespace": "race", "gpus": 1 + (i % 3)}
        await js.publish(subjects.INTAKE_CLAIMS, msgspec.json.encode(spec))
    await wait_allocated(nc, 1, timeout=10.0)
    for i in range(0, 40, 4):
        await request(nc, subjects.command("claim.release"), {"claim_id": f"w{number}-{i}"})


@pytest.mark.timeout(240)
async def test_two_allocator_processes_never_grant_a_device_twice(fresh_nats, tmp_path):
    nc = await nats.connect(fresh_nats.url)
    await ensure_streams(nc.jetstream())
    log = JetStreamEventLog(nc)
    await register_nodes(log, *(h100_node(f"n{i}") for i in range(4)))  # 32 GPUs
    procs = [start_allocator(fresh_nats.url, tmp_path, f"alloc{i}") for i in range(2)]
    try:
        async with running(fresh_nats.url, "claim"):
            js = nc.jetstream()
            for number in range(12):  # until both wrote decisions and one append was fenced out
                await wave(nc, js, number)
                events = [(s.seq, s.event) async for s in log.read()]
                writers = {e.allocator for _, e in events if isinstance(e, ev.DecisionBatch)}
                if len(writers) == 2 and fenced_out(tmp_path) and number >= 2:
                    break
            summary = await wait_allocated(nc, 1)
        events = [(s.seq, s.event) async for s in log.read()]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
        await nc.close()
    batches = [(seq, e) for seq, e in events if isinstance(e, ev.DecisionBatch)]
    assert len({b.allocator for _, b in batches}) == 2, "both allocators must have written decisions"
    names = [f"{socket.gethostname()}-{p.pid}" for p in procs]  # how the allocator names itself
    retried = [(names[i], expected) for i, expected in fenced_at(tmp_path)
               if any(b.allocator == names[i] and seq > expected for seq, b in batches)]
    assert fenced_out(tmp_path) >= 1, "no append was fenced out: the race was not exercised"
    assert retried, "an allocator fenced out must catch up and append decisions again"
    state = fold(events)
    holders = [(u.uuid, len(u.holders)) for u in state.units.values()]
    assert all(n <= 1 for _, n in holders), "a device is held by two whole-GPU claims"
    allocations = [d for _, b in batches for d in b.decisions if isinstance(d, ev.ClaimAllocated)]
    granted = {d.claim_id for d in allocations}
    assert len(allocations) == len(granted), "a claim was allocated twice"
    for d in allocations:  # every allocation in the log took effect: none was void
        assert state.claims[d.claim_id].status in ("allocated", "released"), d.claim_id
    assert summary["claims"].get("allocated", 0) > 0


def fenced_at(tmp_path) -> list[tuple[int, int]]:
    """(allocator index, the decision sequence it expected) for each append fenced out."""
    found = []
    for i in range(2):
        text = (tmp_path / f"alloc{i}.log").read_text(errors="replace")
        found += [(i, int(m)) for m in re.findall(r"decision fenced out \(append to \S+ expected last "
                                                   r"sequence (\d+)", text)]
    return found
