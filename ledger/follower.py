"""The one follower of the log: every service folds the log into its `State` through it.

What is stored when it starts is caught up on in batches: each batch decoded in one loop and
folded with `fold_batch`, the placement index deferred (rebuilt once at the end, or never for a
service that does not place), the cyclic garbage collector paused (a catch-up builds millions of
long-lived objects, and the collector would rescan them again and again). Once caught up, the
state is frozen out of the collector's reach (`gc.freeze`), and the live tail is folded event by
event: hooks see each event before it is folded (`before`, live only) and after (`listeners`,
catch-up included, members of an EventBatch one by one), and `wait_for_seq` lets a handler answer
after its own write.

Options:
- `places=False` for services that never place (claim, quota, pool-controller, projector): the
  placement index (node views and their groups, rebuilt after every change of a node) is never
  built; `reindex_node` only notes the node.
- `linger_s` for services that need not see each event at once (quota, pool-controller,
  dashboard): the live tail is read a pull every `linger_s` (`shared.paced`), one wake-up for
  whatever was stored meanwhile, instead of one per message.
- `collect_old=False` for services that only follow (claim, quota, pool-controller; the projector's
  loop and the simulated agents do the same with their own `Refreezer`): once caught up, only the
  youngest generation is collected automatically, and a refreeze freezes what survived it without
  scanning it again (`old_generation_off`, `Refreezer(young_only=True)`).
- `unread` for services that need none of the events on some subjects (quota, pool-controller:
  `subjects.is_node_bindings`): a message on such a subject is never decoded nor folded, nor told
  to the hooks; only the position moves past it.
- `keep_ended=False` for the allocator, which decides on live claims only: ended claims leave the
  state. During catch-up they go a slice at a time (`SHED_SLICE` more claims than were live at the
  last slice), into `dropped` for the caller to free a part at a time once caught up, until it
  holds `FREE_LATER` claims, and freed at once after that. So a catch-up holds the live claims,
  one slice and at most FREE_LATER ended claims, not every claim of the log.

A follower with no listener and no unread subjects (the allocator's) asks the log for a long
stored range decoded (`follow_raw(decoded=True)`): the read-ahead helper has decoded and admitted
each row already, and hands the admitted payloads over as one JSON array, decoded here in one call
(`shared.readahead.DecodedRows`, folded by `_fold_decoded`); rows it did not admit are read in full
here, in their place. A listener added after the catch-up began still hears every event with its
subject (`_fold_decoded_as_rows`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Callable

from schemas import authority
from schemas import events as ev
from schemas import subjects

from ledger.admission import Admission, read_batch
from ledger.catchup import handlers_for
from ledger.evolve import defer_dropping, drop_ended_claims, evolve, fold_batch, shed_ended_claims
from ledger.state import State, defer_index, flush_index

log = logging.getLogger("gpuledger")
Hook = Callable[[int, str, ev.Event], None]
# Live events folded between two `gc.collect(); gc.freeze()`: the collector then only ever scans
# what was made since the last freeze (a full collection over the whole state cost 60-330 ms at
# 5k-28k claims held). It was 50,000: a service then rescanned every claim folded since its start
# at each automatic full collection (in `bench e2e --claims 20000`, 10-28 % of the CPU of the
# claim service, projector, quota and pool-controller went to the collector); a collection of
# 2,000 events' objects costs a few ms.
REFREEZE_EVERY = 2_000
# Cyclic garbage among frozen objects is never collected by the above (the state's objects form
# none; a future or a message frozen while in flight might): every this many refreezes (a million
# events) everything is unfrozen and collected once.
UNFREEZE_EVERY = 500
# Catch-up with `keep_ended=False`: ended claims are shed once the state holds this many claims more
# than it kept at the last shedding. Freeing each claim as it ends costs twice as much as freeing
# them in a slice (their memory comes back cold one at a time); a slice bounds what is held.
SHED_SLICE = 20_000
# ... and the slices' claims are put aside with the last one (`dropped`, freed by the caller after it
# is caught up: the allocator between its first passes) until this many are: freeing them is work a
# restart's first decisions need not wait for (60,000 of a 1M-event log's: 0.23 s of CPU here). About
# 3.5 KB a claim of `bench replay`'s log: they hold some 230 MB more at most, whatever the log's length.
FREE_LATER = 60_000
# `old_generation_off`: the older generations' automatic thresholds while they are off (never reached).
OLD_GENERATION_OFF = 1 << 30


def decode_batch(batch, admission: Admission | None = None) -> list[tuple[int, ev.Event | None]]:
    """(seq, event) for each (seq, subject, payload, headers) of a batch; None for a message a fold
    skips (undecodable, or refused by the writer-authority table: see `ledger.admission`)."""
    return read_batch(admission or Admission(), batch)


def pause_gc() -> bool:
    """Catch-up builds millions of long-lived objects and frees few cycles: CPython's cyclic
    collector would rescan the growing heap again and again (a third of a replay's time here)."""
    was_on = gc.isenabled()
    gc.disable()
    return was_on


def resume_gc(was_on: bool) -> None:
    """The state built so far lives as long as the process: keep later collections off it."""
    gc.freeze()
    if was_on:
        gc.enable()


def refreeze() -> None:
    """Collect what was made since the last freeze, then freeze what survived."""
    gc.collect()
    gc.freeze()


def refreeze_young() -> None:
    """`refreeze` for a process whose older generations are left alone (`old_generation_off`):
    everything is frozen as it is, nothing scanned. What is here survived a young collection,
    which frees the cycles that die young (nearly all of them: in `bench e2e --claims 20000` the
    claim service's middle collections found 96 objects of garbage, the young ones 960): the state
    a fold keeps, hardly ever garbage; what garbage is frozen among it waits for the unfreeze. Each
    object a fold keeps was scanned twice before it was frozen (a young collection, then a middle
    one, or this refreeze's `gc.collect(1)`), now once: the services' collections took 28-31 us of
    CPU per claim, now 15-20 (docs/benchmarks.md, "Session 31, speed-cost")."""
    gc.freeze()


class Refreezer:
    """Keeps the cyclic collector off what lives long: `add(n)` after n live events (or other
    units of work); every `every` of them, `refreeze` (`refreeze_young` with `young_only`); every
    `unfreeze_every` refreezes, a full collection of everything first."""

    def __init__(self, every: int = REFREEZE_EVERY, unfreeze_every: int = UNFREEZE_EVERY,
                 young_only: bool = False):
        self.every, self.unfreeze_every, self.young_only = every, unfreeze_every, young_only
        self.count = self.refreezes = 0

    def add(self, n: int = 1) -> None:
        self.count += n
        if self.count < self.every:
            return
        self.count = 0
        self.refreezes += 1
        if self.refreezes % self.unfreeze_every == 0:
            gc.unfreeze()
            refreeze()
        elif self.young_only:
            refreeze_young()
        else:
            refreeze()


_old_off_depth = 0  # nested `old_generation_off` (several followers in one test process)
_old_thresholds = (0, 0)  # the middle and oldest generations' thresholds to give back


@contextlib.contextmanager
def old_generation_off():
    """While inside, the collector collects only the youngest generation by itself: for a process
    whose long-lived objects a `Refreezer(young_only=True)` freezes. Left on, CPython collects the
    oldest whenever a quarter more objects reached it since the last full pass (every claim folded
    since the last freeze scanned again and again), and the middle one every tenth young collection
    (every object a fold keeps scanned a second time, before the refreeze freezes it)."""
    global _old_off_depth, _old_thresholds
    if _old_off_depth == 0:
        first, *_old_thresholds = gc.get_threshold()
        gc.set_threshold(first, OLD_GENERATION_OFF, OLD_GENERATION_OFF)
    _old_off_depth += 1
    try:
        yield
    finally:
        _old_off_depth -= 1
        if _old_off_depth == 0:
            first, _second, _third = gc.get_threshold()
            gc.set_threshold(first, *_old_thresholds)


class Follower:
    def __init__(self, event_log, state: State | None = None, *, places: bool = True,
                 keep_ended: bool = True, linger_s: float = 0.0, refreeze_every: int = REFREEZE_EVERY,
                 collect_old: bool = True, unread: Callable[[str], bool] | None = None):
        self.log = event_log
        self.unread = unread  # subjects whose messages this follower skips undecoded
        self.linger_s = linger_s  # > 0: the live tail in bursts (shared.paced), for slow readers
        self.state = state or State()
        self.places, self.keep_ended = places, keep_ended
        self.listeners: list[Hook] = []
        self.before_live: list[Hook] = []
        self.after_live: list[Hook] = []
        # told (seq, subject) of each live message no fold believes (undecodable, or refused by
        # authority): it is stored all the same, and moves its subject's last sequence
        self.skipped_live: list[Callable[[int, str], None]] = []
        # asked before each live event is folded: True when its writer already applied it to this
        # state (the allocator's own decision batch), so the fold skips it; hooks still hear it
        self.applied: Callable[[int, str, ev.Event], bool] | None = None
        # asked before a live message is decoded: the event itself when the message is what its
        # writer appended and already applied (the allocator's batch, by its bytes), so the fold
        # skips it without decoding it; hooks hear the event returned
        self.applied_stored: Callable[[int, str, bytes], ev.Event | None] | None = None
        self.caught_up = asyncio.Event()
        self.dropped: list = []  # ended claims the catch-up dropped (keep_ended=False)
        self.live_events = 0
        self.collect_old = collect_old  # False: see `old_generation_off`
        self.refreezer = Refreezer(refreeze_every, young_only=not collect_old)
        self.admission = Admission()  # what was skipped: undecodable, or refused by authority
        self._advanced = asyncio.Condition()
        self._waiting = 0  # callers of `wait_until` waiting now
        self._gc_was_on = False
        self._shed_at = 0  # catch-up: shed ended claims once `claims` holds this many
        if not keep_ended:
            drop_ended_claims(self.state)
        if not places:
            defer_index(self.state)  # and never flushed: nothing here reads the index

    @property
    def last_seq(self) -> int:
        return self.state.last_seq

    async def run(self, until: int | None = None) -> None:
        """Fold the log from where the state is, forever. Caught up once the state reaches `until`
        (default: the end of the log when this starts)."""
        end = await self.log.last_seq() if until is None else until
        if end > self.state.last_seq:
            self._start_catch_up()
        else:
            self._end_catch_up()
        paced = {"linger_s": self.linger_s} if self.linger_s else {}  # logs in tests lack it
        if not self.listeners and self.unread is None:  # nothing but the fold reads the events
            paced["decoded"] = True  # a long catch-up's rows come decoded (`_fold_decoded`)
            # ... and the range read so ends where the catch-up does (the log's end may have moved
            # on since `end` was taken): no decoded batch reaches `_fold_live`, and every release
            # the read-ahead helper read is folded before the catch-up ends (`DoomedClaim`)
            paced["range_end"] = end
            if not self.keep_ended:  # ended claims leave the state: what only they kept need not come
                paced["drop_dead"] = True  # (`shared.readahead.DecodedFrames`)
        with contextlib.ExitStack() as collector:
            if not self.collect_old:
                collector.enter_context(old_generation_off())
            # headers: no fold reads them, and parsing a stored message's took longer than the rest
            # of reading it (shared.fastread)
            async for batch in self.log.follow_raw(self.state.last_seq + 1, headers=False, **paced):
                if self.caught_up.is_set():
                    self._fold_live(batch)
                else:
                    self._fold_stored(batch)
                    if self.state.last_seq >= end:
                        self._end_catch_up()
                if self._waiting:  # a lock taken and given back per batch for nobody, otherwise
                    async with self._advanced:
                        self._advanced.notify_all()

    def _start_catch_up(self) -> None:
        defer_index(self.state)
        if not self.keep_ended:
            defer_dropping(self.state)  # ended claims go a slice at a time (`_fold_stored`)
            self._shed_at = len(self.state.claims) + SHED_SLICE
        self._gc_was_on = pause_gc()

    def _end_catch_up(self) -> None:
        if self.places:
            flush_index(self.state)
        if not self.keep_ended:
            drop_ended_claims(self.state, self.dropped)
            self._shed_at = 0
        if not gc.isenabled():
            resume_gc(self._gc_was_on)
        self.caught_up.set()

    def _fold_stored(self, batch) -> None:
        """A stored range: decoded in one loop, folded with `fold_batch`, then shown to listeners;
        with no listener (the allocator's catch-up), read and folded in one loop instead, or folded
        as the read-ahead helper decoded it (`shared.readahead.DecodedRows`, asked for by `run`)."""
        if getattr(batch, "raw", None) is not None:
            self._fold_decoded(batch)
        elif self.unread is not None and batch:
            end, unread = batch[-1][0], self.unread
            batch = [message for message in batch if not unread(message[1])]
            self._fold_stored_read(batch)
            self.state.last_seq = max(self.state.last_seq, end)
        else:
            self._fold_stored_read(batch)

    def _fold_stored_read(self, batch) -> None:
        if not self.listeners:
            self._fold_stored_alone(batch)
            return
        admission = self.admission
        skipped = admission.refused + admission.undecodable
        decoded = read_batch(admission, batch)
        fold_batch(self.state, decoded, admission.fold_failed)
        if self._shed_at and len(self.state.claims) >= self._shed_at:
            self._shed_at = shed_ended_claims(self.state, self._aside()) + SHED_SLICE
        if admission.refused + admission.undecodable != skipped:  # rare: look for the decision subject
            for (seq, event), (_seq, subject, _data, _headers) in zip(decoded, batch):
                if event is None and subject == subjects.DECISIONS:
                    self._skipped_decision(seq)
        if self.listeners:
            for (seq, event), (_seq, subject, _data, _headers) in zip(decoded, batch):
                if event is not None:
                    self._tell(self.listeners, seq, subject, event)

    def _fold_stored_alone(self, batch) -> None:
        """`_fold_stored` for a follower no listener hears: each message decoded, admitted and
        folded in one loop, with no list of decoded events in between (`read_batch` + `fold_batch`
        with the same outcomes: a skipped message still moves the decision fence, a fold that
        raises is counted and skipped, the position ends at the batch's last sequence)."""
        state, admission = self.state, self.admission
        decode, handlers = ev.event_decoder(), handlers_for(state)
        admit_of, refuse = authority.ADMIT, authority.admits  # `admits` for a type with no row
        decisions = subjects.DECISIONS
        # 1 where the range's reader already decoded the row and the authority table admitted it
        # (shared.readahead's helper, the same checks): the check is not made twice
        admitted = getattr(batch, "admitted", None) or bytes(len(batch))
        for (seq, subject, data, _headers), checked in zip(batch, admitted):
            try:
                event = decode(data)
            except Exception:  # say which and why, and count it (or read it leniently)
                event = admission.read(seq, subject, data)
            else:
                if not checked and not admit_of.get(type(event), refuse)(subject, event):
                    event = admission.admit(seq, subject, event)
            if event is None:
                if subject == decisions:
                    self._skipped_decision(seq)
                continue
            handler = handlers.get(type(event))
            if handler is not None:
                try:
                    handler(state, event, seq)
                except Exception as err:  # logged, counted, skipped: never a stalled service
                    admission.fold_failed(seq, event, err)
        if batch and batch[-1][0]:
            state.last_seq = batch[-1][0]
        if self._shed_at and len(state.claims) >= self._shed_at:
            self._shed_at = shed_ended_claims(state, self._aside()) + SHED_SLICE

    def _fold_decoded(self, batch) -> None:
        """`_fold_stored_alone` for a batch the read-ahead helper decoded: (seq, event) for each
        row it decoded with the strict types and admitted on its subject (the checks made there
        are the ones made here), (seq, subject, payload) for a row read here in full."""
        if not batch:
            return
        if self.listeners or self.unread is not None:  # `run` asks for these only where neither is
            self._fold_decoded_as_rows(batch)  # (a listener added after the catch-up began)
            return
        state, admission = self.state, self.admission
        handlers = handlers_for(state)
        last = batch[-1][0]
        # rows read here are read in their place: a decision skipped moves the fence in log order
        for seq, event in (self._read_in_place(batch) if batch.raw else batch):
            handler = handlers.get(type(event))
            if handler is not None:
                try:
                    handler(state, event, seq)
                except Exception as err:  # logged, counted, skipped: never a stalled service
                    admission.fold_failed(seq, event, err)
        if last:
            state.last_seq = last
        if self._shed_at and len(state.claims) >= self._shed_at:
            self._shed_at = shed_ended_claims(state, self._aside()) + SHED_SLICE

    def _fold_decoded_as_rows(self, batch) -> None:
        """A decoded batch for a follower with listeners or unread subjects (one added after the
        catch-up began): what `_fold_stored` does with rows, the rows' subjects from the batch."""
        unread, read = self.unread, self.admission.read
        rows = [(row, subject) for row, subject in zip(batch, batch.subjects())
                if unread is None or not unread(subject)]
        decoded = [row if len(row) == 2 else (row[0], read(row[0], subject, row[2])) for row, subject in rows]
        fold_batch(self.state, decoded, self.admission.fold_failed)
        self.state.last_seq = max(self.state.last_seq, batch[-1][0])
        if self._shed_at and len(self.state.claims) >= self._shed_at:
            self._shed_at = shed_ended_claims(self.state, self._aside()) + SHED_SLICE
        for (seq, event), (_row, subject) in zip(decoded, rows):
            if event is None:
                if subject == subjects.DECISIONS:
                    self._skipped_decision(seq)
            elif self.listeners:
                self._tell(self.listeners, seq, subject, event)

    def _read_in_place(self, batch):
        """(seq, event) for each row of a decoded batch, the rows the helper did not admit read in
        full here as they come (`Admission`: counted, logged, None to skip), in log order."""
        for row in batch:
            if len(row) == 2:
                yield row
                continue
            seq, subject, data = row
            event = self.admission.read(seq, subject, data)
            if event is None and subject == subjects.DECISIONS:
                self._skipped_decision(seq)
            yield seq, event

    def _aside(self) -> list | None:
        """Where a catch-up's shed claims go: `dropped` until it holds FREE_LATER, then nowhere."""
        return self.dropped if len(self.dropped) < FREE_LATER else None

    def _fold_live(self, batch) -> None:
        state, before, after = self.state, self.before_live, self.listeners + self.after_live
        applied, known, unread = self.applied, self.applied_stored, self.unread
        for seq, subject, data, _headers in batch:
            if unread is not None and unread(subject):  # needed by nothing here: never decoded
                state.last_seq = seq
                continue
            event = known(seq, subject, data) if known is not None else None
            if event is not None:
                self._skip_applied(seq, subject, event)
                continue
            event = self.admission.read(seq, subject, data)
            if event is None:
                if subject == subjects.DECISIONS:
                    self._skipped_decision(seq)
                state.last_seq = seq
                for hook in self.skipped_live:
                    hook(seq, subject)
                continue
            if applied is not None and applied(seq, subject, event):
                self._skip_applied(seq, subject, event)
                continue
            if before:
                self._tell(before, seq, subject, event)
            try:
                evolve(state, event, seq)
            except Exception as err:  # logged, counted, skipped: never a stalled service
                self.admission.fold_failed(seq, event, err)
                state.last_seq = seq
                continue
            if after:
                self._tell(after, seq, subject, event)
        self.live_events += len(batch)
        self.refreezer.add(len(batch))

    def _skip_applied(self, seq: int, subject: str, event: ev.Event) -> None:
        """An event its writer already applied to this state: heard by the hooks, not folded."""
        if self.before_live:
            self._tell(self.before_live, seq, subject, event)
        self.state.last_seq = seq
        after = self.listeners + self.after_live
        if after:
            self._tell(after, seq, subject, event)

    def _skipped_decision(self, seq: int) -> None:
        """The fence is the decision subject's last sequence as stored: a message there that no
        fold believes still moves it, or the allocator's every append would be fenced out by it."""
        self.state.last_decision_seq = max(self.state.last_decision_seq, seq)

    @staticmethod
    def _tell(hooks: list[Hook], seq: int, subject: str, event: ev.Event) -> None:
        for member in ev.flatten(event):  # an EventBatch's events one by one
            for hook in hooks:
                hook(seq, subject, member)

    async def wait_for_seq(self, seq: int, timeout: float | None = 10.0) -> bool:
        """Until the state has folded `seq`; False if that took longer than `timeout`."""
        return await self.wait_until(lambda: self.state.last_seq >= seq, timeout)

    async def wait_until(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        # what holds already is not waited for, and a wait runs under `asyncio.timeout`, not
        # `wait_for` (a task per call: the intake waits so once per batch, at 1,000 claims/s
        # nearly once per claim)
        if predicate():
            return True
        self._waiting += 1
        try:
            async with asyncio.timeout(timeout):
                async with self._advanced:
                    await self._advanced.wait_for(predicate)
            return True
        except TimeoutError:
            return predicate()
        finally:
            self._waiting -= 1


StateFollower = Follower  # the name services used before there was one follower for all
