"""The allocator's I/O shell: fold the log, decide, append fenced decision batches.

One task follows the log and folds every event into the in-memory state (the projection); another
decides whenever something relevant changed or a timer tick is due, and appends the decisions as
one `DecisionBatch` with `Nats-Expected-Last-Subject-Sequence` on the decision subject. It then
waits until its own batch is folded before deciding again (at its ack, when the fold is right
before it: `OwnBatch.settle_at_ack`), so the state it decides on is always exactly a prefix of the
log. A wrong-last-sequence answer means another
allocator decided first: catch up to that sequence, decide again. Under load the claims that
arrive while a batch is in flight are decided together in the next one.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace

import msgspec

from schemas import events as ev
from schemas import subjects
from schemas.subjects import _token
from shared import hop_stamps
from shared.retry import DELAYS_S as RETRY_DELAYS_S, TRANSIENT
from shared.eventlog import AppendConflict
from shared.settings import Settings
from shared.telemetry import extract_context, inject_headers, tracer

from ledger.follower import Follower
from ledger.integrity import dangling_references
from ledger.state import State
from services.allocator.core.decide import POLICY_VERSION, DecideContext, decide_kept
from services.allocator.core.frag_cache import FragCache
from services.allocator.core.heard import Heard
from services.allocator.core.scorers import DEFAULT_POLICY
from services.allocator.core.waiting import WaitingIndex
from services.allocator.claim_fences import ClaimFences
from services.allocator.end_fence import mark_endings, unbound_endings
from services.allocator.node_records import nodes_touched
from services.allocator.own_batch import OwnBatch

log = logging.getLogger("gpuledger.allocator")

# Events after which a decision pass may have something new to do; heartbeats and usage reports
# only matter to the timers, which run on the tick anyway.
_TRIGGERS = (ev.ClaimSubmitted, ev.ClaimReleased, ev.NodeRegistered, ev.DeviceHealthChanged,
             ev.NodeConditionChanged, ev.PoolCreated, ev.PoolDeleted, ev.PoolAccessChanged,
             ev.FleetDefaultsSet, ev.QuotaSet, ev.QuotaDeleted, ev.DecisionBatch, ev.ClaimRejected)


ALLOCATOR_REFREEZE_EVERY = 50_000  # live events between two refreezes (ledger.follower)


# A full collection of everything unfrozen once in this many freezes between passes: the cycles
# frozen among the survivors (few: a young collection frees nearly all that die) are freed then.
UNFREEZE_EVERY = 500
_between = {"young": 0, "freezes": 0}  # young collections since the last freeze; freezes


def collect_between_passes() -> int | None:
    """Run the collection CPython's thresholds call for, now, between decision passes (the
    allocator turns automatic collection off once caught up): left automatic, it fires inside
    whichever pass happens to allocate past a threshold, and a gen-2 scan of the claims made since
    catch-up is about 1 ms at 1,000 nodes, as long as a whole pass. The youngest generation is
    collected when its threshold is passed; where CPython would collect an older one (every
    `threshold[1]` young collections), what survived is frozen instead, unscanned: a middle
    collection scanned each survivor again (14 ms each, 113 ms in a `bench e2e --claims 20000`,
    as much as all the young ones), and every tenth of them was a full pass over every claim held
    (about 100 ms). Every UNFREEZE_EVERY freezes, everything is unfrozen and collected once.
    Returns the generation collected (1 for a freeze, 2 for the full collection), None when no
    threshold was reached."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    if not thresholds[0] or counts[0] < thresholds[0]:
        return None
    _between["young"] += 1
    if _between["young"] < thresholds[1]:
        gc.collect(0)
        return 0
    _between["young"] = 0
    _between["freezes"] += 1
    if _between["freezes"] % UNFREEZE_EVERY:
        gc.collect(0)  # the cycles that died young are freed first, as by any young collection
        gc.freeze()
        return 1
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return 2


async def free_slowly(objects: list, step: int = 2000) -> None:
    """Free what a catch-up dropped a slice at a time, between decision passes: the ended claims of
    a 1M-event log (200k) take about 0.5 s to free, a pause the first decisions need not wait for."""
    while objects:
        del objects[-step:]
        await asyncio.sleep(0)


FAILED_PASSES_BEFORE_CHECK = 3  # passes failed in a row before the state is checked
EXIT_DAMAGED_STATE = 70  # EX_SOFTWARE: restarted by the supervisor with a state from the log


class Allocator:
    def __init__(self, event_log, settings: Settings, name: str,
                 clock: Callable[[], float] = time.time, state: State | None = None):
        self.log = event_log
        self.settings = settings
        self.name = name
        self.clock = clock
        # decides on live claims only; collects between its passes itself, its own objects
        # too many to collect every REFREEZE_EVERY events (measured: 36 ms a time)
        self.follower = Follower(event_log, state, keep_ended=False, refreeze_every=ALLOCATOR_REFREEZE_EVERY)
        self.follower.before_live.append(self._before)
        self.follower.after_live.append(self._after)
        self.follower.skipped_live.append(self._skipped)
        # the batch in flight stays applied until the fold reaches it (own_batch.py)
        self.own = OwnBatch()
        self.follower.applied = lambda seq, subject, event: self.own.settle(self.state, seq, subject, event)
        self.follower.applied_stored = lambda seq, subject, data: self.own.settle_stored(
            self.state, seq, subject, data)
        self.caught_up = self.follower.caught_up
        self.dirty = asyncio.Event()
        self._traces: dict[str, dict[str, str]] = {}
        self.batches_appended = 0
        self.endings_marked = 0  # ClaimEnding marks appended (services/allocator/end_fence.py)
        self.heard_since = 0.0  # see DecideContext.heard_since; set by `reconnected`
        # when each node, submit, allocation and renewal was heard, on this allocator's clock: what
        # silence is judged by, never another host's clock (core/heard.py); `since` set at the first pass
        self.heard = Heard(own=name)
        self._reconnects_seen = 0
        self._resync_to = 0  # the stream's last sequence when the connection last came back
        self.conflicts = 0
        self.failed_passes = 0
        self.failed_in_row = 0
        self.memo: dict = {}  # placement scores per node view, kept across passes
        self.waiting = WaitingIndex()  # the waiting claims by bucket of claims alike (core/waiting.py)
        self.needs_memo: dict = {}  # claim -> its needs and rule arguments (core/place.py)
        self.frag = FragCache()  # the fragmentation measure's memos, this allocator's own
        self.reclaiming: asyncio.Task | None = None  # frees the claims a catch-up dropped
        # called after each decision pass with (seconds, decisions): the metrics' one hook per pass
        self.on_pass: Callable[[float, int], None] | None = None
        # the writer of each node's record of live claims (schemas.grants), when there is one:
        # told which nodes every event folded live touches
        self.node_records = None
        # what each unbound claim's binding is conditioned on, and the claims being ended
        # (claim_fences.py): heard from every live event, whoever wrote it
        self.fences = ClaimFences()
        # `bench e2e --hops` (shared/hop_stamps.py): when each waiting claim was folded, when the
        # pass in flight had decided; carried on its decision batch
        self.stamp = hop_stamps.enabled()
        self._read_at: dict[str, float] = {}
        self._decided_at = 0.0

    @property
    def state(self) -> State:
        return self.follower.state

    # --- folding ---------------------------------------------------------------------------

    async def follow(self, start_end: int) -> None:
        """Fold the log from where the state is, forever (caught up at `start_end`)."""
        waiting = asyncio.ensure_future(self._when_caught_up())
        try:
            await self.follower.run(start_end)
        finally:
            waiting.cancel()

    async def _when_caught_up(self) -> None:
        await self.caught_up.wait()
        self.dirty.set()  # what the catch-up folded may be waiting for a decision
        if self.follower.dropped:
            self.reclaiming = asyncio.get_running_loop().create_task(free_slowly(self.follower.dropped))

    def _before(self, seq: int, subject: str, event: ev.Event) -> None:
        if self.node_records is not None:
            self.node_records.mark(nodes_touched(self.state, event))

    def _after(self, seq: int, subject: str, member: ev.Event) -> None:
        if isinstance(member, ev.ClaimSubmitted):
            if member.trace:
                self._traces[member.claim.claim_id] = member.trace
            if self.stamp:
                self._read_at[member.claim.claim_id] = time.time()
        elif isinstance(member, ev.DecisionBatch):  # decided, by us or another allocator
            for decision in member.decisions:
                if isinstance(decision, (ev.ClaimAllocated, ev.AllocationRejected)):
                    self._traces.pop(decision.claim_id, None)
                    self._read_at.pop(decision.claim_id, None)
        elif isinstance(member, ev.ClaimReleased):
            self._traces.pop(member.claim_id, None)
            self._read_at.pop(member.claim_id, None)
        if isinstance(member, _TRIGGERS):
            self.dirty.set()
        if type(member) is ev.UsageObserved:
            self.heard.usage(member, self.state.units, self.clock())
        else:
            self.heard.hear(member, self.clock())
        moved = self.fences.heard(seq, subject, member)
        if isinstance(member, ev.ClaimSubmitted):
            self.fences.prune(self.state.claims)
        if self.node_records is not None:
            if moved:
                self.node_records.mark(self.nodes_of(moved))
            self.node_records.flush()

    def _skipped(self, seq: int, subject: str) -> None:
        """A stored message no fold believes (a forgery on a node's fence subject, garbage) still
        moves the subjects a binding is conditioned on: the node's fence follows, or its claims
        are never bound."""
        moved = self.fences.heard(seq, subject, None)
        if moved and self.node_records is not None:
            self.node_records.mark(self.nodes_of(moved))
            self.node_records.flush()

    def nodes_of(self, tokens) -> list[str]:
        """The nodes these subject tokens name (a name is its own token but for a '.' in it)."""
        nodes = self.state.nodes
        found = [t for t in tokens if t in nodes]
        if len(found) < len(tokens):
            by_token = {_token(name): name for name in nodes}
            found += [by_token[t] for t in tokens if t not in nodes and t in by_token]
        return found

    async def wait_for_seq(self, seq: int) -> None:
        await self.follower.wait_for_seq(seq, timeout=None)

    # --- deciding ----------------------------------------------------------------------------

    async def decide_forever(self) -> None:
        """Pass after pass. A pass that is due when the last one ends (claims were folded while
        its batch was in flight) starts at once, without first yielding to the event loop: that
        yield ran a whole loop iteration before every such pass (the socket write of the records
        `passed()` just published, the reads and folds of whatever had arrived, other tasks), and
        on a busy machine an iteration is a millisecond or more (docs/benchmarks.md, "Session 29,
        speed-latency"). What arrives meanwhile is folded while this pass's batch waits for its
        ack, and the records go out in the same socket write as the batch. Every pass that
        appends awaits its ack, so the rest of the process never waits long for the loop."""
        await self.caught_up.wait()
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        collecting = gc.isenabled()  # then collect between passes, not inside them
        gc.disable()
        try:
            while True:
                await self._until_dirty_or(next_tick)
                timers = loop.time() >= next_tick
                if timers:  # the tick: leases, silent nodes, and a full retry of the queue
                    next_tick = loop.time() + self.settings.tick_s
                self.dirty.clear()
                if not timers and not self.state.queue:
                    continue  # nothing waits: a pass without the timers could decide nothing
                await self.decide_once(timers)
                if self.node_records is not None:
                    await self.node_records.passed()  # what waited for this pass (node_writer.py)
                if collecting:
                    collect_between_passes()
        finally:
            if collecting:
                gc.enable()

    def pass_due(self) -> bool:
        """A pass is about to run on claims that wait (something relevant was folded since the
        last one began): its decisions may change the nodes just marked for their records."""
        return self.dirty.is_set() and bool(self.state.queue)

    async def _until_dirty_or(self, deadline: float) -> None:
        """Until something relevant changed or the loop's clock reaches `deadline` (the tick).
        Not `asyncio.wait_for`, which makes a task, a waiter and a timer each time: at 1,000
        claims/s the allocator waits a few hundred times a second."""
        if self.dirty.is_set():  # no yield: see `decide_forever`
            return
        loop = asyncio.get_running_loop()
        if loop.time() >= deadline:
            return
        tick = loop.call_at(deadline, self.dirty.set)
        try:
            await self.dirty.wait()
        finally:
            tick.cancel()

    def context(self, timers: bool = True) -> DecideContext:
        heard = self.heard
        if not heard.since:  # caught up: what the catch-up folded counts as heard from now
            heard.since = self.clock()
        heard.prune(self.state.claims, self.state.nodes)
        return DecideContext(heard=heard,
            now=self.clock(), policy=self.settings.policy or DEFAULT_POLICY, check_timers=timers,
            memo=self.memo, waiting=self.waiting, needs_memo=self.needs_memo, frag=self.frag,
            node_timeout_s=self.settings.node_timeout_s, stale_after_s=self.settings.stale_after_s,
            starvation_after_s=self.settings.starvation_after_s,
            pending_expire_after_s=self.settings.pending_expire_after_s,
            release_unused_after_s=self.settings.release_unused_after_s, heard_since=self.heard_since)

    async def decide_once(self, timers: bool = True) -> int:
        """One pass: decide, append fenced, wait to see it folded. Returns decisions stored."""
        if not await self.hearing():  # blind: silence now is no evidence, and nothing could be stored
            return 0
        started = time.perf_counter()
        try:
            decisions, journal = decide_kept(self.state, self.context(timers))
        except Exception:  # a bug must not stop every later decision: logged, tried again next pass
            self.failed_passes += 1
            self.failed_in_row += 1
            log.exception("decision pass failed (%d so far)", self.failed_passes)
            self._start_again_if_damaged()
            return 0
        self.failed_in_row = 0
        if self.stamp:
            self._decided_at = time.time()
        if self.on_pass is not None:
            self.on_pass(time.perf_counter() - started, len(decisions))
        if not decisions or await self._heard_past_the_fold(decisions):
            journal.rollback(self.state)
            return 0
        batch = ev.DecisionBatch(decisions=decisions, allocator=self.name,
                                 policy_version=POLICY_VERSION, based_on_seq=self.state.last_seq,
                                 at=decisions[0].at)
        # the fence is the last decision this pass saw, taken now: the fold goes on while the
        # marks below are appended, and a batch of another allocator folded meanwhile must fence
        # this one out, not become its fence
        fence = self.state.last_decision_seq
        # kept applied until the fold reaches it, or rolled back now (own_batch.py): before the
        # endings are read, which look at the state before the batch
        payload = ev.encode_event(batch)
        limit = self._max_batch_bytes()
        while limit is not None and len(payload) > limit and len(decisions) > 1:
            # one NATS message: past the server's max payload every append failed, the allocator
            # exited, again at each start (the claims stay), and `up` stopped the stack (session
            # 29: 1,024 claims of 8 GPUs placed on 1,100 free nodes make 1.0-1.4 MB)
            journal.rollback(self.state)
            log.warning("a batch of %d decisions is %d bytes, past the max payload: deciding again with "
                        "a budget of %d", len(decisions), len(payload), len(decisions) // 2)
            ctx = replace(self.context(timers), max_decisions=len(decisions) // 2, backfill_past_budget=False)
            decisions, journal = decide_kept(self.state, ctx)
            if not decisions:
                journal.rollback(self.state)
                return 0
            batch = msgspec.structs.replace(batch, decisions=decisions, at=decisions[0].at)
            payload = ev.encode_event(batch)
        self.heard.allocated(decisions, batch.at)  # its leases run from now (heard again when folded)
        self.own.hold(self.state, batch, journal, payload)
        try:
            return await self._append(batch, decisions, fence, payload)
        finally:
            self.own.undo(self.state)  # fenced out or failed (a kept batch was settled by the fold)
            if self.node_records is not None:  # records wait while a batch is held (node_writer.py)
                self.node_records.flush()

    def _max_batch_bytes(self) -> int | None:
        """The server's max payload, less room for the batch's own fields and headers."""
        max_payload = getattr(getattr(self.log, "nc", None), "max_payload", None)
        return max_payload - 16 * 1024 if isinstance(max_payload, int) and max_payload > 64 * 1024 else None

    async def _heard_past_the_fold(self, decisions: list) -> bool:
        """Whether a node this pass finds silent, or a claim whose lease it finds run out, has
        written since the fold's position: a busy allocator reads the log late, and silence in a
        late fold is no evidence (session 27: 2,000 waiting claims put the fold 44 events behind,
        and every node was declared lost on heartbeats stored but unread). Asked only for such
        decisions (rare), by direct get; the pass is then dropped and made again on a later
        fold. tests/outsider/test_lost_on_a_late_fold.py"""
        for decision in decisions:
            if isinstance(decision, ev.NodeLost):
                subject = subjects.node(decision.node)
            elif isinstance(decision, ev.AllocationExpired):
                subject = subjects.claim(decision.claim_id)
            else:
                continue
            try:
                last = await self.log.last_subject_seq(subject, direct=True)
            except TRANSIENT:  # no answer: decided as before (the append needs NATS too)
                return False
            if last > self.state.last_seq:
                log.info("%s: %s has %d past the fold (%d); deciding again later", type(decision).__name__,
                         subject, last, self.state.last_seq)
                return True
        return False

    def _start_again_if_damaged(self) -> None:
        """Passes that keep failing on a state that names claims it no longer holds would fail
        forever: exit, so the supervisor (`gpuledger up`, a Deployment) starts the allocator again
        from its last snapshot and the log, which a damaged state never reaches (app.py). Nothing is
        lost: every decision is in the log, and a kill -9 is a restart this process survives."""
        if self.failed_in_row < FAILED_PASSES_BEFORE_CHECK:
            return
        damage = dangling_references(self.state)
        if damage:
            log.critical("the allocator's state is damaged (%s): exiting to rebuild it from the log",
                         "; ".join(damage))
            logging.shutdown()
            os._exit(EXIT_DAMAGED_STATE)

    async def _append_batch(self, batch: ev.DecisionBatch, payload: bytes, fence: int):
        """The batch appended as `payload` (its encoding, made once: kept to know it again when
        the fold reaches it) where the log takes bytes; else as the event."""
        headers = inject_headers()
        if self.stamp:
            headers[hop_stamps.HEADER] = self._stamps(batch)
        append_raw = getattr(self.log, "append_raw", None)
        if append_raw is not None:
            return await append_raw(subjects.DECISIONS, payload, expected_last_subject_seq=fence,
                                    headers=headers)
        return await self.log.append(subjects.DECISIONS, batch, expected_last_subject_seq=fence,
                                     headers=headers)

    def _stamps(self, batch: ev.DecisionBatch) -> str:
        """When each decision's claim was folded (0: not a claim's, or folded before stamping),
        when the pass had decided, and now, as the append goes out."""
        read = [self._read_at.get(getattr(decision, "claim_id", ""), 0.0) for decision in batch.decisions]
        return hop_stamps.encode({"read": read, "decided": self._decided_at, "append": time.time()})

    async def _append(self, batch: ev.DecisionBatch, decisions: list, fence: int, payload: bytes) -> int:
        endings = unbound_endings(self.state, decisions)
        records = getattr(self, "node_records", None) if endings else None
        if records is not None:  # no record folded past the marks before the batch is folded
            records.hold()
        try:
            with tracer().start_as_current_span("allocator.decide", context=self._parent(decisions)) as span:
                span.set_attribute("gpuledger.decisions", len(decisions))
                if endings:  # move each unbound claim's subject first: its binding cannot land after
                    await mark_endings(self.log, endings, fence, batch.at)
                    self.endings_marked += len(endings)
                try:
                    appended = await self._append_batch(batch, payload, fence)
                except AppendConflict as conflict:
                    self.conflicts += 1
                    span.set_attribute("gpuledger.conflict", True)
                    log.info("decision fenced out (%s); catching up", conflict)
                    if conflict.actual:
                        await self.wait_for_seq(conflict.actual)
                    self.dirty.set()
                    return 0
            self.batches_appended += 1
            if self.own.settle_at_ack(self.state, appended.seq, batch):  # the fold was right before it
                if self.node_records is not None:  # written after this pass, not when it comes
                    self.node_records.mark(nodes_touched(self.state, batch))
            else:
                await self.wait_for_seq(appended.seq)
        finally:
            if records is not None:
                records.release()
        return len(decisions)

    async def hearing(self) -> bool:
        """Connected, and the fold has read what the stream held when the connection came back.
        A reconnect is seen here, before each pass, from the client's reconnect count (a pass may
        run between the reconnect and nats-py's reconnected callback); until the fold has caught up
        (its consumer is made anew after a server restart) a pass would judge nodes silent on
        heartbeats that are stored but not yet read."""
        nc = getattr(self.log, "nc", None)
        if nc is None:
            return True
        if not nc.is_connected:
            return False
        reconnects = nc.stats.get("reconnects", 0)
        if reconnects != self._reconnects_seen:
            try:
                self._resync_to = await self.log.last_seq()
            except TRANSIENT:
                return False  # asked again before the next pass
            self._reconnects_seen = reconnects
            self.reconnected()
        return self.state.last_seq >= self._resync_to

    def reconnected(self) -> None:
        """NATS is back after an outage: nodes and lease holders get a full timeout to be heard
        again before they are judged silent, counted from when their next retry comes at the
        latest (a writer waiting out the outage pauses up to the longest backoff step)."""
        self.heard_since = self.clock() + RETRY_DELAYS_S[-1]
        self.dirty.set()

    def _parent(self, decisions):
        for decision in decisions:
            trace = self._traces.get(getattr(decision, "claim_id", ""))
            if trace:
                return extract_context(trace)
        return None
