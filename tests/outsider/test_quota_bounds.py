"""A quota's amounts are bounded. Found by the session-25 outsider: `gpu.cmd.quota.set` (and
`gpuledger quota apply -f` of a manifest) stored `requests_vram: '99999999999999999999999Ti'`
(1e29 MiB), `max_workers: 10**26` and `requests_tflops: 1e308` as they came. A count past 2^64
cannot be written in the allocator's msgpack snapshot, so the first snapshot after such a quota
failed, and a crash in the snapshot task stops the allocator; 400 nines of VRAM made float()
infinite and the service answered `internal` (OverflowError) instead of naming the field."""

from __future__ import annotations

import asyncio

import msgspec
import nats
import pytest

from ledger.evolve import evolve
from ledger.snapshot import to_snapshot
from ledger.state import State
from schemas import events as ev
from schemas import subjects
from schemas.types import QuotaSpec, QuotaTotal, Resources
from services.allocator import app as allocator_app
from services.allocator.loop import Allocator
from services.quota.manifest import quota_from_document
from services.quota.validation import spec_from_command
from shared.jetstream import JetStreamEventLog
from shared.settings import Settings
from tests.service.helpers import request, running


@pytest.mark.parametrize("field, value, words", [
    ("requests_vram", "99999999999999999999999Ti", "above the largest amount a quota may name"),
    ("limits_vram", "9" * 400 + "Ti", "above the largest amount a quota may name"),
    ("requests_tflops", 1e308, "above the largest amount a quota may name"),
    ("single_max_requests_tflops", "1" + "0" * 30, "above the largest amount a quota may name"),
    ("max_workers", 10**26, "must be at most 2147483647"),
    ("single_max_gpu_count", 2**64, "must be at most 2147483647"),
])
async def test_huge_amounts_are_refused_naming_the_field(fresh_nats, field, value, words):
    async with running(fresh_nats.url, "quota"):
        nc = await nats.connect(fresh_nats.url)
        reply = await request(nc, subjects.command("quota.set"), {"namespace": "hx-a", field: value})
        assert reply["ok"] is False, reply
        assert reply["error"]["code"] == "invalid" and reply["error"]["field"] == field
        assert words in reply["error"]["message"]
        log = JetStreamEventLog(nc)
        assert [s async for s in log.read()] == []
        await nc.close()


def test_a_manifest_at_the_bounds_is_taken_and_its_state_can_be_snapshot():
    doc = {"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUResourceQuota",
           "metadata": {"namespace": "team-a"},
           "spec": {"total": {"requests": {"vram": "1024Pi", "tflops": "1000000000000"},
                              "maxWorkers": 2**31 - 1},
                    "single": {"maxGPUCount": 2**31 - 1}}}
    command, _ = quota_from_document(doc)
    spec = spec_from_command(command, {})
    state = State()
    state = evolve(state, ev.QuotaSet(namespace="team-a", spec=spec, at=1.0))
    assert msgspec.msgpack.decode(to_snapshot(state)) is not None


def test_an_old_log_with_a_huge_quota_skips_the_snapshot_and_keeps_the_allocator(monkeypatch):
    """A log written before the bounds may hold such a quota for good: the allocator goes on
    without a snapshot (it only saves time) instead of stopping at each one."""
    state = State()
    huge = QuotaSpec(total=QuotaTotal(max_workers=10**26, requests=Resources(vram_mib=10**29)))
    state = evolve(state, ev.QuotaSet(namespace="hx-a", spec=huge, at=1.0), 1)
    saved = []

    async def save(js, state):
        saved.append(len(to_snapshot(state, compact=True)))  # what save_snapshot does first
        return saved[-1]

    monkeypatch.setattr(allocator_app, "save_snapshot", save)
    allocator = Allocator(None, Settings(nats_url="nats://unused"), "a", state=state)
    assert asyncio.run(allocator_app.snapshot_if_due(None, allocator, 0, every=1)) == 1
    assert saved == []
