"""The projector's loop: refold up to the stored position, then follow the log and commit
batches. Reading goes on while a batch commits (in a thread), so the database write and the
network read overlap."""

from __future__ import annotations

import asyncio
import itertools
import logging

from schemas import events as ev

from ledger.follower import Refreezer, old_generation_off, refreeze
from services.projector.models import ClaimRow
from services.projector.projector import Projector
from services.projector.replay import batches
from shared.paced import SLOW_READER_LINGER_S
from services.projector.store import Changes, PositionMoved, commit

log = logging.getLogger("gpuledger.projector")

MAX_BATCH = 5000  # events per transaction: big enough to amortise the commit, small enough to
                  # keep each transaction short
# A commit takes what arrived within this long of the one before: under load a claim submitted,
# allocated, bound and released within it is one row write, not four, and the transaction, the
# position update and the rows of its node and namespace are paid once per window, not per event.
COMMIT_EVERY_S = 0.1
# Under load the window widens: once claim rows are written at BUSY_ROWS_PER_S or more (the last
# window's rows over the time since the commit before: some hundreds of claims a second), a window
# lasts BUSY_COMMIT_EVERY_S. A claim's rows, its devices' and its node's are then written once where
# they were written two or three times (submitted, then allocated, then released in separate
# windows), and the transaction is paid five times less often: about a third less CPU per claim at
# 1,000 claims/s. A quieter log keeps the short window (the read models lag by about COMMIT_EVERY_S).
BUSY_COMMIT_EVERY_S = 0.5
BUSY_ROWS_PER_S = 500.0
# At saturation rates the window widens again: once claim rows come at FLOOD_ROWS_PER_S or more, a
# window lasts FLOOD_COMMIT_EVERY_S. In `bench e2e --claims 20000` (about 1,000-2,400 claims/s, each
# claim submitted, explained, allocated, bound and released within seconds) the projector spent
# about a tenth less CPU per claim with 2 s windows than with 0.5 s; the tables lag the log by about
# 2 s while claims come that fast, by no more than before below that rate.
FLOOD_COMMIT_EVERY_S = 2.0
FLOOD_ROWS_PER_S = 1500.0
# With nothing but the agents' periodic reports (heartbeats, usage) to write, a window lasts
# QUIET_COMMIT_EVERY_S: an idle stack of 100 nodes sends about 20 a second, and committing them every
# COMMIT_EVERY_S was ten transactions a second, a third of the idle stack's CPU (docs/benchmarks.md,
# "Session 35, speed-cost"). Anything else staged in such a window ends it within COMMIT_EVERY_S,
# so a claim's rows lag the log no more than before.
QUIET_COMMIT_EVERY_S = 1.0
_QUIET = (ev.NodeHeartbeat, ev.UsageObserved)
RETRY_S = (0.2, 0.5, 1.0, 2.0, 5.0)
# After another writer moved the position: it must stand still this long before this projector
# refolds and writes again (`stand_by`). Each live projector commits every COMMIT_EVERY_S (a few
# seconds at most) while events come.
STANDBY_QUIET_S = 10.0


async def catch_up_in_memory(projector: Projector, event_log) -> int:
    """Fold the log up to the stored position without writing: where the last run stopped."""
    position = projector.stored_position()
    async for batch in batches(event_log, 1, position):
        for seq, event in batch:
            projector.fold(seq, event)
    if projector.position < position:
        log.warning("the log ends at %d but the projection is at %d", projector.position, position)
        projector.position = position
    return position


async def run(projector: Projector, event_log, max_batch: int = MAX_BATCH,
              on_commit=None, quiet_s: float | None = None) -> None:
    """Project forever; a moved position (a rebuild, a second projector) restarts from the DB,
    once it has stood still for `quiet_s` (`stand_by`; default STANDBY_QUIET_S)."""
    while True:
        try:
            await _project(projector, event_log, max_batch, on_commit)
        except PositionMoved as moved:
            log.warning("%s; refolding from the stored position", moved)
            projector.reset()
            await stand_by(projector, STANDBY_QUIET_S if quiet_s is None else quiet_s)


async def stand_by(projector: Projector, quiet_s: float) -> int:
    """Wait while another writer moves the stored position (a second projector on the same
    database): each of its commits would fence this one out again, and every refold reads the whole
    log, so two live projectors refolded for ever, each in turn. This one waits, saying so once,
    until the position has not moved for `quiet_s` (the other stopped, or the log is quiet: taking
    over then costs one refold), and returns how many times it looked."""
    last, looks, said = await asyncio.to_thread(projector.stored_position), 0, False
    while True:
        await asyncio.sleep(quiet_s)
        looks += 1
        now = await asyncio.to_thread(projector.stored_position)
        if now == last:
            if said:
                log.warning("projection %s: its position stood still for %.0f s: this projector takes "
                            "over at %d", projector.name, quiet_s, now)
            return looks
        if not said:
            log.error("projection %s is being written by another projector (its position moved from %d "
                      "to %d): this one stands by until it stops (one writer per read-model database; "
                      "docs/reliability.md, Replicas)", projector.name, last, now)
            said = True
        last = now


async def _project(projector: Projector, event_log, max_batch: int, on_commit) -> None:
    await catch_up_in_memory(projector, event_log)
    with old_generation_off():  # what each commit adds to the state: frozen by the refreezer
        await _project_live(projector, event_log, max_batch, on_commit)


async def _project_live(projector: Projector, event_log, max_batch: int, on_commit) -> None:
    refreeze()  # the state lives as long as the process: the collector never scans it again
    # nor what each commit adds to it (a third of the projector's CPU), young objects aside
    refreezer = Refreezer(young_only=True)
    queue: asyncio.Queue = asyncio.Queue(maxsize=64)
    reader = asyncio.create_task(_read(event_log, projector.position + 1, queue))
    loop = asyncio.get_running_loop()
    window_s, last_commit = COMMIT_EVERY_S, loop.time()
    try:
        while True:
            quiet = await _stage_window(projector, queue, max_batch, loop.time() + window_s,
                                        quiet_window=window_s == QUIET_COMMIT_EVERY_S)
            changes = projector.take()
            if changes is not None:
                now = loop.time()
                window_s = QUIET_COMMIT_EVERY_S if quiet else commit_window_s(changes, now - last_commit)
                last_commit = now
                await commit_with_retry(projector, changes)
                if on_commit is not None:
                    on_commit(changes)
                refreezer.add(changes.events)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


def commit_window_s(changes: Changes, span_s: float) -> float:
    """How long the next window stages events, by how busy the last one (`span_s` long) was."""
    rows = len(changes.replace.get(ClaimRow, ()))
    if rows >= FLOOD_ROWS_PER_S * span_s:
        return FLOOD_COMMIT_EVERY_S
    return BUSY_COMMIT_EVERY_S if rows >= BUSY_ROWS_PER_S * span_s else COMMIT_EVERY_S


async def _read(event_log, from_seq: int, queue: asyncio.Queue) -> None:
    # in bursts: the read models are committed a window at a time anyway
    async for batch in batches(event_log, from_seq, linger_s=SLOW_READER_LINGER_S):
        await queue.put(batch)


async def _stage_window(projector: Projector, queue: asyncio.Queue, max_batch: int, until: float,
                        quiet_window: bool = False) -> bool:
    """Wait for events, then take what is read until `until` (the loop's clock), up to `max_batch`.
    In a `quiet_window` an event other than the agents' periodic reports ends the window within
    COMMIT_EVERY_S. Returns whether all it staged were such reports."""
    loop = asyncio.get_running_loop()
    quiet = True

    def stage(batch) -> None:
        nonlocal quiet, until
        for seq, event in batch:
            projector.stage(seq, event)
            if quiet and type(event) not in _QUIET:
                quiet = False
                if quiet_window:
                    until = min(until, loop.time() + COMMIT_EVERY_S)

    stage(await queue.get())
    while projector.staged < max_batch:
        try:
            batch = queue.get_nowait() if queue.qsize() else await asyncio.wait_for(
                queue.get(), max(until - loop.time(), 0.0))
        except asyncio.TimeoutError:
            return quiet
        stage(batch)
    return quiet


async def commit_with_retry(projector: Projector, changes: Changes) -> None:
    """An unreachable database is waited for; the rows are already built, the commit is idempotent."""
    for attempt in itertools.count():
        try:
            await asyncio.to_thread(commit, projector.engine, projector.name, changes)
            return
        except PositionMoved:
            raise
        except Exception as err:  # infrastructure errors: the database restarts, a lock times out
            delay = RETRY_S[min(attempt, len(RETRY_S) - 1)]
            log.warning("commit of %d..%d failed (%s); retrying in %.1fs", changes.base_seq + 1,
                        changes.last_seq, err, delay)
            await asyncio.sleep(delay)
