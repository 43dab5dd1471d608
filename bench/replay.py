"""`gpuledger bench replay`: rebuild the allocator's state from a log of N events, and restart it
from a snapshot of that log plus a tail.

Steps: write a synthetic log (`bench.replay_log`) into a fresh stream with a sliding window of
acks; rebuild through the allocator's own start path (`Allocator.follow` on the JetStream log,
deferred placement index, flushed when caught up) and time it, then time reading alone and folding
alone; save a snapshot to the NATS object store as the allocator does, append a tail of 1 % more
events, and time a restart (load the snapshot + fold the tail). Every rebuilt state is checked
against the live fold (`digest`). Figures are wall clock on this machine; nothing asserts on them.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from schemas import subjects
from schemas.events import encode_event
from shared.jetstream import JetStreamEventLog, connect, ensure_streams
from shared.natsserver import start_nats_server
from shared.settings import Settings

from bench.replay_child import peak_rss_mb, state_digest
from bench.replay_log import SyntheticLog
from ledger.digest import compact_digest
from ledger.evolve import defer_dropping, drop_ended_claims, fold_batch
from ledger.state import State, defer_index, flush_index
from ledger.follower import Follower, decode_batch, pause_gc, resume_gc
from services.allocator.loop import Allocator
from services.allocator.snapshots import load_snapshot, save_snapshot

WINDOW = 2000  # unacknowledged publishes in flight


class Writer:
    """Raw publishes with a reply inbox and a sliding window of acks (DESIGN.md: ~45k msgs/s)."""

    def __init__(self, nc):
        self.nc, self.inflight, self.errors = nc, asyncio.Semaphore(WINDOW), []
        self.inbox = nc.new_inbox()
        self.sub = None
        self.bytes = 0

    async def start(self) -> None:
        self.sub = await self.nc.subscribe(self.inbox + ".*", cb=self._ack)

    async def _ack(self, msg) -> None:
        if msg.data.startswith(b'{"error"') or b'"error"' in msg.data[:20]:
            self.errors.append(msg.data[:200].decode(errors="replace"))
        self.inflight.release()

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str] | None = None) -> None:
        await self.inflight.acquire()
        self.bytes += len(payload)
        await self.nc.publish(subject, payload, reply=f"{self.inbox}.a", headers=headers)

    async def drain(self) -> None:
        for _ in range(WINDOW):
            await self.inflight.acquire()
        for _ in range(WINDOW):
            self.inflight.release()
        await self.sub.unsubscribe()
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} publishes failed, first: {self.errors[0]}")


def service_headers(subject: str, number: int) -> dict[str, str]:
    """The headers a service's append stores with a message like this one (`JetStreamEventLog.
    append_raw`): `Nats-Expected-Stream` on every one, a message id on the claim service's and the
    node agents' (their conditional headers are left out: a synthetic log cannot know the
    sequences they would name)."""
    headers = {"Nats-Expected-Stream": "GPULEDGER"}
    if subject in (subjects.INTAKE_BATCHES, subjects.SUBMITS) or subject.startswith(_WITH_MSG_ID) or subject.endswith(".bound"):
        headers["Nats-Msg-Id"] = f"bench-{number}"
    return headers


_WITH_MSG_ID = subjects.claim("c").removesuffix("c")  # gpu.evt.claim.<token>


async def write(nc, source, until_events: int, headers: bool = False, numbered: int = 0) -> dict:
    """Publish messages from `source` until `until_events` events are written; with `headers`, each
    stored with what a service's append stores (`service_headers`; message ids from `numbered` on)."""
    writer, events, messages = Writer(nc), 0, 0
    await writer.start()
    start, gc_on = time.perf_counter(), pause_gc()
    try:
        for subject, event, count in source:
            await writer.publish(subject, encode_event(event),
                                 service_headers(subject, numbered + messages) if headers else None)
            events, messages = events + count, messages + 1
            if events >= until_events:
                break
        await writer.drain()
    finally:
        resume_gc(gc_on)
    return {"events": events, "messages": messages, "bytes": writer.bytes,
            "seconds": time.perf_counter() - start}


async def rebuild(log, settings: Settings, state: State | None = None,
                  cpu: dict | None = None) -> tuple[State, float, float]:
    """The allocator's start: fold from the state's position to the end, index flushed at the end.
    Returns the state, the seconds until it was caught up (ready to decide), and the seconds after
    that until the ended claims the catch-up dropped were freed (in slices, between passes); with
    `cpu`, this process's CPU seconds until caught up go in `cpu["ready"]` (and the `perf_counter`
    time it was caught up in `cpu["ready_at"]`)."""
    start, cpu_start = time.perf_counter(), time.process_time()
    allocator = Allocator(log, settings, "bench-replay", state=state)
    end = await log.last_seq()
    task = asyncio.create_task(allocator.follow(end))
    caught_up = asyncio.create_task(allocator.caught_up.wait())
    await asyncio.wait({task, caught_up}, return_when=asyncio.FIRST_COMPLETED)
    ready = time.perf_counter()
    if cpu is not None:
        cpu["ready"], cpu["ready_at"] = time.process_time() - cpu_start, ready
    task.cancel()
    if task.done() and not task.cancelled() and task.exception():
        raise task.exception()
    if allocator.reclaiming is not None:
        await allocator.reclaiming
    return allocator.state, ready - start, time.perf_counter() - ready


async def rebuild_in_child(nats_url: str) -> dict:
    """The full rebuild in a process of its own (`bench.replay_child`): its time, and its peak
    memory apart from this process's (which holds the generator's fold and the log it wrote)."""
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    child = await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.replay_child", nats_url,
                                                 stdout=asyncio.subprocess.PIPE,
                                                 stderr=asyncio.subprocess.PIPE, env=env, cwd=root)
    out, err = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"the rebuild process failed ({child.returncode}): {err.decode()[-2000:]}")
    return json.loads(out.decode().strip().splitlines()[-1])


async def read_only(log, end: int) -> tuple[list, float]:
    """Read the stream back with no decoding: the transport's share (headers left unread, as the
    catch-up reads). Returns the batches as read."""
    start, batches, gc_on = time.perf_counter(), [], pause_gc()  # as the allocator's catch-up
    try:
        async for batch in log.follow_raw(1, stop_at=end, headers=False):
            batches.append(batch)
    finally:
        resume_gc(gc_on)
    return batches, time.perf_counter() - start


async def read_only_natspy(log, end: int) -> float:
    """The same read through nats-py's ordered push consumer (the path before shared.fastread)."""
    start, gc_on, count = time.perf_counter(), pause_gc(), 0
    try:
        async for batch in log._follow_ordered(1, None, end):
            count += len(batch)
    finally:
        resume_gc(gc_on)
    return time.perf_counter() - start


class StoredBatches:
    """Batches already read, handed to a `Follower` as a log hands over a stored range."""

    def __init__(self, batches: list):
        self.batches = batches

    async def last_seq(self) -> int:
        return self.batches[-1][-1][0] if self.batches else 0

    async def follow_raw(self, from_seq: int = 1, **_):
        for batch in self.batches:
            yield batch
        await asyncio.Event().wait()  # no live tail


async def catch_up_without_read(batches: list, log=None) -> tuple[State, float]:
    """The allocator's catch-up (its `Follower`: decode, admit, fold, shed, index flushed) over
    batches already in memory: `seconds` less this is what reading the stream costs the rebuild.
    `log`: another source of the same batches (`bench.replay_offline.Frames`)."""
    follower = Follower(log or StoredBatches(batches), keep_ended=False)
    start = time.perf_counter()
    task = asyncio.create_task(follower.run())
    await follower.caught_up.wait()
    seconds = time.perf_counter() - start
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    del follower.dropped[:]
    return follower.state, seconds


def decode_and_fold(batches: list, compare: bool) -> dict:
    gc_on = pause_gc()
    try:
        return _decode_and_fold(batches, compare)
    finally:
        resume_gc(gc_on)


def _decode_and_fold(batches: list, compare: bool) -> dict:
    """Decode alone (each batch decoded and dropped), then decode and fold batch by batch as the
    allocator's catch-up does; the fold's share is the difference. Decoding everything first and
    then folding would time the decode with all 1M events kept alive, which the rebuild never does."""
    start = time.perf_counter()
    for batch in batches:
        decode_batch(batch)
    decode_s = time.perf_counter() - start
    eager_s = _fold_eager(batches) if compare else None
    start, state = time.perf_counter(), drop_ended_claims(State())  # as the allocator folds
    defer_index(state)
    defer_dropping(state)
    for batch in batches:
        fold_batch(state, decode_batch(batch))
    flush_index(state)
    dropped: list = []
    drop_ended_claims(state, dropped)  # freed after, as the allocator frees them after catching up
    both_s = time.perf_counter() - start
    del dropped
    return {"decode_s": decode_s, "fold_s": both_s - decode_s, "decode_fold_s": both_s,
            "eager_s": eager_s, "state": state}


def _fold_eager(batches: list) -> float:
    """The fold with the placement index kept up to date after every event (before deferral)."""
    decoded = [decode_batch(batch) for batch in batches]
    start, state = time.perf_counter(), drop_ended_claims(State())
    for stored in decoded:
        fold_batch(state, stored)
    return time.perf_counter() - start


async def measure(nats_url: str, events: int, nodes: int, batched: bool, tail_fraction: float,
                  compare: bool, headers: bool = False) -> dict:
    nc = await connect(nats_url, name="bench-replay")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        log = JetStreamEventLog(nc)
        if await log.last_seq() != 0:
            raise SystemExit("bench replay needs an empty GPULEDGER stream: point --nats-url at a fresh "
                             "server or leave it out (an embedded one is started)")
        synthetic = SyntheticLog(nodes, batched=batched)
        source = synthetic.messages()
        wrote = await write(nc, source, events, headers)
        end = await log.last_seq()
        settings = Settings(nats_url=nats_url)

        child = await rebuild_in_child(nats_url)
        if child["digest"] != state_digest(synthetic.settled()):
            raise RuntimeError("full rebuild: the rebuilt state differs from the live fold")
        full_s, freed_s = child["seconds"], child["freed_s"]
        batches, read_s = await read_only(log, end)
        natspy_s = await read_only_natspy(log, end) if compare else None
        caught_up, no_read_s = await catch_up_without_read(batches)
        _check(caught_up, synthetic.settled(), "catch-up without the read")
        del caught_up
        folded = decode_and_fold(batches, compare)
        _check(folded["state"], synthetic.settled(), "fold")
        state = folded.pop("state")  # the same fold as the rebuild's (digest checked): snapshot it
        del batches

        start = time.perf_counter()
        snapshot_bytes = await save_snapshot(js, state)
        save_s = time.perf_counter() - start
        tail = await write(nc, source, max(int(events * tail_fraction), 1), headers, wrote["messages"])
        start = time.perf_counter()
        restored = await load_snapshot(js)
        load_s = time.perf_counter() - start
        restarted, tail_s, _ = await rebuild(log, settings, restored)
        _check(restarted, synthetic.settled(), "snapshot + tail")
    finally:
        await nc.close()
    figures = _figures(wrote, tail, end, full_s, read_s, folded, snapshot_bytes, save_s, load_s,
                       tail_s, nodes, batched)
    figures["service_headers"] = headers
    figures["dropped_claims_freed_after_seconds"] = round(freed_s, 2)
    figures["catch_up_without_read_seconds"] = round(no_read_s, 2)
    # the rebuild's process: its peak, and what it held before reading an event (the interpreter)
    # CPU seconds of the full rebuild: its own process's, and its read-ahead helper's (the read of
    # all but the first messages, in a process of its own: shared.readahead)
    figures["rebuild_cpu_seconds"] = child["cpu_s"]
    figures["rebuild_cpu_seconds_until_caught_up"] = child["cpu_ready_s"]
    figures["read_ahead_helper_cpu_seconds"] = child["helper_cpu_s"]
    # which side was the slower: the rebuild waiting for its helper's frames (the first: while
    # it starts), and folding after the helper wrote its last one (`shared.readahead.last_read`)
    figures["read_ahead_waited_seconds"] = child.get("helper_waited_s")
    figures["read_ahead_first_waited_seconds"] = child.get("helper_first_waited_s")
    figures["rebuild_run_queue_wait_seconds"] = child.get("run_queue_wait_s")  # ready, but no CPU free
    figures["after_read_ahead_seconds"] = child.get("after_helper_s")
    figures["peak_rss_mb"] = child["peak_rss_mb"]
    figures["rebuild_rss_before_mb"] = child["rss_before_mb"]
    figures["claims_held_after_rebuild"] = child["claims_held"]
    figures["bench_process_peak_rss_mb"] = round(peak_rss_mb(), 1)  # the generator's side
    if compare:
        figures["before_read_only_natspy_seconds"] = round(natspy_s, 2)
        figures["before_read_only_natspy_messages_per_s"] = round(end / natspy_s)
        figures["before_fold_only_eager_index_seconds"] = round(folded["eager_s"], 2)
    return figures


def _check(state: State, live: State, what: str) -> None:
    """The allocator's state keeps live claims and the ids of ended ones (`drop_ended_claims`); the
    live fold keeps every claim: they must agree on the live claims, the ended ids and the rest."""
    if compact_digest(state) != compact_digest(live):
        raise RuntimeError(f"{what}: the rebuilt state differs from the live fold")


def _figures(wrote, tail, end, full_s, read_s, folded, snapshot_bytes, save_s, load_s, tail_s,
             nodes, batched) -> dict:
    n = wrote["events"]
    return {
        "events": n, "messages": wrote["messages"], "nodes": nodes, "batched_writers": batched,
        "events_per_message": round(n / wrote["messages"], 2), "bytes": wrote["bytes"],
        "write_seconds": round(wrote["seconds"], 2),
        "write_messages_per_s": round(wrote["messages"] / wrote["seconds"]),
        "seconds": round(full_s, 2), "events_per_s": round(n / full_s),
        "messages_per_s": round(wrote["messages"] / full_s),
        "read_only_seconds": round(read_s, 2), "read_only_messages_per_s": round(end / read_s),
        "decode_seconds": round(folded["decode_s"], 2),
        "decode_fold_seconds": round(folded["decode_fold_s"], 2),
        "fold_only_seconds": round(folded["fold_s"], 2),
        "fold_only_events_per_s": round(n / folded["fold_s"]),
        "snapshot_bytes": snapshot_bytes, "snapshot_save_seconds": round(save_s, 2),
        "tail_events": tail["events"], "tail_messages": tail["messages"],
        "snapshot_load_seconds": round(load_s, 2),
        "snapshot_restart_seconds": round(load_s + tail_s, 2),
        "digest_checked": True, "cpu_load_1m": round(os.getloadavg()[0], 2),
    }


def run(events: int, nodes: int, nats_url: str | None = None, batched: bool = True,
        tail_fraction: float = 0.01, compare: bool = False, headers: bool = False) -> dict:
    """Write a log of `events` events for `nodes` nodes, rebuild and restart from it; the figures.
    `compare` also times the paths this work replaced (nats-py's reader, the eager index);
    `headers` stores each message with the headers a service's append gives it."""
    if events < 1:
        raise SystemExit("--events must be at least 1")
    if nodes < 1:
        raise SystemExit("--nodes must be at least 1")
    if nats_url:
        return asyncio.run(measure(nats_url, events, nodes, batched, tail_fraction, compare, headers))
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-") as folder:
        server = start_nats_server(folder)
        try:
            return asyncio.run(measure(server.url, events, nodes, batched, tail_fraction, compare, headers))
        finally:
            server.stop()
