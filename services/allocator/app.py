"""The allocator service: restore (snapshot + tail), then fold and decide forever."""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from schemas import subjects
from schemas.commands import Query, ok
from shared.commands import command
from shared.service import ServiceContext

from ledger.integrity import dangling_references
from services.allocator.fence_lookup import resolve_fences_forever
from services.allocator.loop import Allocator
from services.allocator.metrics import instrument
from services.allocator.node_records import record_of
from services.allocator.node_writer import NodeRecordWriter
from services.allocator.snapshots import load_snapshot, save_snapshot

log = logging.getLogger("gpuledger.allocator")


async def build(ctx: ServiceContext) -> None:
    js = ctx.nc.jetstream()
    state = await load_snapshot(js)
    name = f"{socket.gethostname()}-{os.getpid()}"
    allocator = Allocator(ctx.log, ctx.settings, name, state=state)
    end = await ctx.log.last_seq()
    if state is not None:
        log.info("restored snapshot at seq %d; replaying %d events", state.last_seq, end - state.last_seq)
    ctx.spawn(allocator.follow(end), "allocator-follow")
    ctx.spawn(allocator.decide_forever(), "allocator-decide")
    writer = allocator.node_records = NodeRecordWriter(
        ctx.nc, lambda node: record_of(allocator.state, node, allocator.fences))
    writer.paused = lambda: allocator.own.holding
    writer.pass_due = allocator.pass_due
    ctx.spawn(_write_node_records(allocator, writer), "allocator-node-records")
    ctx.spawn(resolve_fences_forever(js, allocator), "allocator-claim-fences")
    ctx.spawn(_snapshot_forever(js, allocator, ctx.settings.snapshot_every), "allocator-snapshot")
    ctx.allocator = allocator  # type: ignore[attr-defined]  # for in-process tests
    instrument(ctx.metrics, allocator, ctx.log.last_seq)

    async def status(_: Query):
        s = allocator.state
        return ok({
            "allocator": name, "last_seq": s.last_seq, "last_decision_seq": s.last_decision_seq,
            "nodes": len(s.nodes), "groups": len(s.groups), "pending": len(s.pending),
            "claims": len(s.claims), "batches_appended": allocator.batches_appended,
            "conflicts": allocator.conflicts, "own_batches_kept": allocator.own.kept,
            "own_batches_undone": allocator.own.undone, "own_batches_undone_by": allocator.own.undone_by,
            "node_records_written": writer.writes,
            "node_record_conflicts": writer.conflicts, "node_records_too_big": len(writer.too_big_nodes),
            "node_records_too_big_nodes": sorted(writer.too_big_nodes)[:20]})

    command(ctx.broker, subjects.query("allocator.status"), Query, status)


async def _write_node_records(allocator: Allocator, writer: NodeRecordWriter) -> None:
    """Once caught up (the records follow the fold, never a part of it), forever."""
    await allocator.caught_up.wait()
    await writer.run(lambda: list(allocator.state.nodes))


async def _snapshot_forever(js, allocator: Allocator, every: int) -> None:
    last = allocator.state.last_seq
    while True:
        await asyncio.sleep(5.0)
        last = await snapshot_if_due(js, allocator, last, every)


async def snapshot_if_due(js, allocator: Allocator, last: int, every: int) -> int:
    """Save a snapshot when `every` events were folded since `last`; returns the new `last`."""
    # not while a decided batch is kept applied ahead of the log (own_batch.py), nor while the
    # catch-up drops ended claims: its state is the log's fold only once it ends (ledger.state.DoomedClaim)
    if allocator.state.last_seq - last < every or allocator.own.holding or allocator.state.ends_deferred:
        return last
    damage = dangling_references(allocator.state)
    if damage:  # never made durable: a restart would load it
        log.error("snapshot skipped at seq %d: the state is damaged (%s)",
                  allocator.state.last_seq, "; ".join(damage))
        return last
    try:
        size = await save_snapshot(js, allocator.state)
    except OverflowError as err:  # a number msgpack cannot hold (a log written before quotas were
        # bounded): a snapshot only saves time, so go on without one rather than stop the allocator
        log.error("snapshot skipped at seq %d: the state cannot be written (%s)", allocator.state.last_seq, err)
        return allocator.state.last_seq
    log.info("snapshot at seq %d (%d bytes)", allocator.state.last_seq, size)
    return allocator.state.last_seq
