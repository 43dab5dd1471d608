"""The event log on NATS JetStream (the production implementation of `shared.eventlog`)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import re

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js import api
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError, ServiceUnavailableError

from schemas import subjects
from schemas.events import Event, decode_event, encode_event
from shared.natscluster import connect_args
from shared import nats_headers
from shared.direct_sub import subscribe_direct
from shared.direct_tail import DirectTail
from shared import jsreply
from shared import readahead
from shared.fastread import RangeReadError, open_range_reader
from shared.paced import PacedTail
from shared.retry import TRANSIENT as TRANSIENT_ERRORS, quiet_error, until_done
from shared.eventlog import (
    EXPECTED_LAST_SUBJECT_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ_SUBJECT,
    MSG_ID,
    AppendConflict,
    Appended,
    StoredEvent,
    subject_matches,
)

WRONG_LAST_SEQUENCE = {10071, 10164}
EXPECTED_STREAM = api.Header.EXPECTED_STREAM
FAST_READ_MIN = 256  # below this many stored messages a consumer of nats-py's is as quick
log = logging.getLogger("gpuledger.eventlog")
nats_headers.install()  # every service reads the log through this module
_ACTUAL = re.compile(r"(\d+)\s*$")


async def connect(url: str, name: str = "gpuledger", **kwargs) -> Client:
    """Connect with reconnects forever: a service outlives a NATS restart. A cluster's URL lists
    its servers comma-separated: each is tried, and another is used when one goes away."""
    kwargs.setdefault("error_cb", quiet_error)
    return await nats.connect(**connect_args(url), name=name, max_reconnect_attempts=-1, reconnect_time_wait=0.5,
                              **kwargs)


def stream_config(replicas: int = 1, duplicate_window_s: float = 120.0) -> api.StreamConfig:
    return api.StreamConfig(
        name=subjects.STREAM,
        subjects=[subjects.EVENTS],
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        num_replicas=replicas,
        duplicate_window=duplicate_window_s,
        deny_delete=True,
        deny_purge=True,
        allow_direct=True,
    )


# What the intake holds at most (GPULEDGER_INTAKE_MAX_MSGS, _MAX_BYTES): past either, nats-server
# refuses a publish with 503 "maximum messages exceeded" / "maximum bytes exceeded" (err_code 10077)
# and keeps everything it acknowledged. Without them a publisher, or a backlog while the claim
# service was down, could fill nats-server's disk, which stops the whole stack (session 31).
INTAKE_MAX_MSGS = 1_000_000  # about 7 minutes of the whole stack's rate: a long outage's backlog
INTAKE_MAX_BYTES = 1 << 30
INTAKE_LIMITS = ("max_msgs", "max_bytes", "discard")


def intake_stream_config(replicas: int = 1, duplicate_window_s: float = 120.0, max_msgs: int = INTAKE_MAX_MSGS,
                         max_bytes: int = INTAKE_MAX_BYTES) -> api.StreamConfig:
    # A work queue: each raw claim is removed once the claim service has turned it into an event.
    # Bounded, refusing new messages when full (never dropping one it took); one message is at most
    # nats-server's max_payload (1 MiB by default: a valid claim fits however it is encoded).
    return api.StreamConfig(
        name=subjects.INTAKE_STREAM,
        subjects=["gpu.intake.>"],
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.WORK_QUEUE,
        num_replicas=replicas,
        duplicate_window=duplicate_window_s,
        max_msgs=max_msgs,
        max_bytes=max_bytes,
        discard=api.DiscardPolicy.NEW,
    )


def node_grants_config(replicas: int = 1) -> api.StreamConfig:
    # A key-value bucket (the stream behind `nats kv`): the latest record of each node only.
    return api.StreamConfig(
        name=subjects.NODE_GRANTS_STREAM,
        subjects=[subjects.NODE_GRANTS],
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        num_replicas=replicas,
        max_msgs_per_subject=1,
        discard=api.DiscardPolicy.NEW,
        allow_rollup_hdrs=True,
        deny_delete=True,
        allow_direct=True,
    )


def outcomes_stream_config(replicas: int = 1) -> api.StreamConfig:
    # Each claim's latest ClaimOutcome, for publishers (docs/contract.md): one message per
    # subject; an outcome unchanged for OUTCOMES_MAX_AGE_S goes (the claim service rewrites the
    # outcomes of live claims before that). Direct get lets a publisher read the last one cheaply.
    return api.StreamConfig(
        name=subjects.OUTCOMES_STREAM,
        subjects=[subjects.OUTCOMES],
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        max_msgs_per_subject=1,
        max_age=subjects.OUTCOMES_MAX_AGE_S,
        num_replicas=replicas,
        allow_direct=True,
    )


NO_PEERS_YET = 10005  # "no suitable peers for placement": a cluster whose servers have not all joined


async def ensure_streams(js: JetStreamContext, replicas: int = 1, intake_max_msgs: int = INTAKE_MAX_MSGS,
                         intake_max_bytes: int = INTAKE_MAX_BYTES, update_limits: bool = False) -> None:
    """Create the streams if missing; leave an existing stream's data alone. A cluster still
    forming refuses a replicated stream until enough servers joined: that refusal is raised as
    unavailable, which `shared.retry.until_done` waits out. `update_limits` (`gpuledger up`, as
    ops: a service's user may only create streams) sets an existing intake's limits to these,
    such as one made before it had any."""
    intake = intake_stream_config(replicas, max_msgs=intake_max_msgs, max_bytes=intake_max_bytes)
    for config in (stream_config(replicas), intake, outcomes_stream_config(replicas),
                   node_grants_config(replicas)):
        try:
            info = await js.stream_info(config.name)
            if update_limits and config is intake and _limits_differ(info.config, intake):
                await js.update_stream(_with_limits(info.config, intake))
        except NotFoundError:
            try:
                await js.add_stream(config)
            except APIError as err:
                if err.err_code == NO_PEERS_YET:
                    raise ServiceUnavailableError(code=503, description=f"{config.name}: {err.description}",
                                                  err_code=err.err_code) from err
                raise


def _limits_differ(have: api.StreamConfig, want: api.StreamConfig) -> bool:
    return any(getattr(have, name) != getattr(want, name) for name in INTAKE_LIMITS)


def _with_limits(have: api.StreamConfig, want: api.StreamConfig) -> api.StreamConfig:
    """The stream's own configuration (its replicas, its window) with `want`'s limits: lowering
    them below what it holds refuses new messages until it has drained, and drops none."""
    for name in INTAKE_LIMITS:
        setattr(have, name, getattr(want, name))
    return have


PUBLISH_TIMEOUT_S = 5.0  # as nats-py's JetStream publish: an ack not back by then is a timeout


class AckInbox:
    """JetStream publishes answered on one wildcard inbox of our own, each reply found by the
    number at the end of its subject: nats-py's `js.publish` makes a fresh token (NUID and random
    bytes), a done-callback and a `wait_for` per publish and parses each ack into a PubAck, about
    twice the client's CPU of this (measured 35-40 against 20 us per append). The same answers:
    the stored sequence and whether it was a duplicate, an `APIError` for a refusal, a timeout or
    "no stream responded" (both transient, retried by `until_done`) when no ack comes."""

    def __init__(self, nc: Client, timeout_s: float = PUBLISH_TIMEOUT_S):
        self.nc, self.timeout_s = nc, timeout_s
        self.prefix = ""
        self.pending: dict[int, asyncio.Future] = {}
        self._numbers = itertools.count(1)
        self._sub = None

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str] | None) -> tuple[int, bool]:
        if self._sub is None:
            prefix = self.nc.new_inbox()
            # replies handed over as they are parsed: no Msg, queue or task each (shared.direct_sub)
            self._sub = await subscribe_direct(self.nc, prefix + ".*", self._on_reply)
            self.prefix = prefix  # nats-py subscribes again by itself after a reconnect
        number = next(self._numbers)
        loop = asyncio.get_running_loop()
        reply = self.pending[number] = loop.create_future()
        timer = loop.call_later(self.timeout_s, _time_out, reply)
        try:
            await self.nc.publish(subject, payload, reply=f"{self.prefix}.{number}", headers=headers)
            data, reply_headers = await reply
        finally:
            timer.cancel()
            self.pending.pop(number, None)
        if not data and reply_headers and reply_headers.get("Status") == "503":
            raise NoStreamResponseError  # no stream listens there now (a leader being elected)
        answer = json.loads(data)
        error = answer.get("error")
        if error is not None:
            raise APIError.from_error(error)
        return answer["seq"], bool(answer.get("duplicate", False))

    def _on_reply(self, _sid: int, subject: bytes, _reply: bytes, data: bytes, headers) -> None:
        try:
            reply = self.pending.get(int(subject.rsplit(b".", 1)[1]))
        except ValueError:
            return
        if reply is not None and not reply.done():
            reply.set_result((data, headers))


def _time_out(reply: asyncio.Future) -> None:
    if not reply.done():
        reply.set_exception(nats.errors.TimeoutError())


class JetStreamEventLog:
    def __init__(self, nc: Client, stream: str = subjects.STREAM):
        self.nc = nc
        self.js = nc.jetstream()
        self.stream = stream
        self._reader_locks: dict[str, asyncio.Lock] = {}  # own_subject_after: one read per subject
        self._acks = AckInbox(nc)

    async def append(self, subject: str, event: Event, *, msg_id: str | None = None,
                     expected_last_subject_seq: int | None = None, expected_subject: str | None = None,
                     headers: dict[str, str] | None = None) -> Appended:
        return await self.append_raw(subject, encode_event(event), msg_id=msg_id,
                                     expected_last_subject_seq=expected_last_subject_seq,
                                     expected_subject=expected_subject, headers=headers)

    async def append_raw(self, subject: str, payload: bytes, *, msg_id: str | None = None,
                         expected_last_subject_seq: int | None = None, expected_subject: str | None = None,
                         headers: dict[str, str] | None = None) -> Appended:
        """`expected_subject`: check `expected_last_subject_seq` against that subject's last
        sequence instead of `subject`'s (nats-server 2.11+; an exact subject here)."""
        hdrs = dict(headers or {})
        if msg_id is not None:
            hdrs[MSG_ID] = msg_id
        if expected_last_subject_seq is not None:
            hdrs[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_subject_seq)
            if expected_subject is not None:
                hdrs[EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = expected_subject
        # An append outlives a NATS outage: retried with backoff until stored. A retry of one that
        # was stored after all is harmless: fenced, it comes back as the conflict its caller already
        # handles; with a msg id, JetStream drops the copy; neither (heartbeats, usage, activity):
        # the fold takes a repeated observation as one.
        hdrs[EXPECTED_STREAM] = self.stream  # stored in this stream or refused, as js.publish asks

        async def publish():
            return await self._acks.publish(subject, payload, hdrs)

        try:
            seq, duplicate = await until_done(publish, f"append to {subject}")
        except APIError as err:
            if err.err_code in WRONG_LAST_SEQUENCE:
                raise AppendConflict(expected_subject or subject, expected_last_subject_seq or 0,
                                     _actual_seq(err.description)) from err
            raise
        return Appended(seq, duplicate)

    async def last_seq(self) -> int:
        info = await self.js.stream_info(self.stream)
        return info.state.last_seq

    async def last_subject_seq(self, subject: str, direct: bool = False) -> int:
        """`direct`: a direct get, which any replica may answer (cheaper than the API's get, but
        possibly a little behind the leader: only for a caller whose next append is conditional
        on it, so a stale answer costs a refused append, never a wrong one)."""
        try:
            msg = await self.js.get_last_msg(self.stream, subject, direct=direct)
        except NotFoundError:
            return 0
        return msg.seq or 0

    async def subject_after(self, subject: str, after_seq: int = 0):
        """The events stored on one subject after `after_seq`, up to its last one, by direct
        'next message on subject' lookups: a request per message, no consumer to set up, and it
        ends at the subject's last message by construction."""
        seq = after_seq + 1
        while True:
            try:
                raw = await self.js.get_msg(self.stream, seq=seq, subject=subject, next=True)
            except NotFoundError:
                return
            yield StoredEvent(raw.seq, raw.subject or subject, decode_event(raw.data), dict(raw.headers or {}))
            seq = raw.seq + 1

    async def own_subject_after(self, subject: str, after_seq: int = 0):
        """The events stored on one subject after `after_seq`, read by a consumer whose create
        request names the subject (`$JS.API.CONSUMER.CREATE.<stream>.<name>.<subject>`): what a
        user allowed to read only its own subjects can do (a node agent, shared.nats_auth), where
        `subject_after`'s gets carry the subject in their body, which permissions cannot see. The
        consumer counts what is there when it is made, and the read ends there. A direct get of
        the subject's last message (its subject in the request's) first: nothing new, no consumer."""
        if await self.last_subject_seq(subject, direct=True) <= after_seq:
            return
        async with self._reader_lock(subject):  # one consumer name per subject (permissions)
            async for stored in self._read_own_subject(subject, after_seq):
                yield stored

    def _reader_lock(self, subject: str) -> asyncio.Lock:
        return self._reader_locks.setdefault(subject, asyncio.Lock())

    async def _add_reader(self, subject: str, after_seq: int):
        """The subject's one reader consumer (`subjects.subject_reader`), made afresh: one left by
        a read cut short (a crash; it would go after a minute idle) is deleted first."""
        name = subjects.subject_reader(subject)
        config = api.ConsumerConfig(
            name=name, filter_subject=subject, deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=after_seq + 1, ack_policy=api.AckPolicy.NONE, inactive_threshold=60.0,
            mem_storage=True)
        try:
            return name, await self.js.add_consumer(self.stream, config=config)
        except APIError:  # exists with another start: a leftover
            await self.js.delete_consumer(self.stream, name)
            return name, await self.js.add_consumer(self.stream, config=config)

    async def _read_own_subject(self, subject: str, after_seq: int):
        name, info = await self._add_reader(subject, after_seq)
        try:
            pending = info.num_pending or 0
            if pending:
                sub = await self.js.pull_subscribe_bind(name, self.stream)
                try:
                    while pending > 0:
                        for msg in await sub.fetch(min(pending, 256), timeout=10):
                            pending -= 1
                            try:
                                event = decode_event(msg.data)
                            except Exception as err:  # as every fold does: skipped, never a stall
                                log.warning("skipping an undecodable message on %s: %s", subject, err)
                                continue
                            yield StoredEvent(jsreply.stream_seq(msg), msg.subject, event,
                                              dict(msg.headers or {}))
                finally:
                    await sub.unsubscribe()
        finally:
            try:
                await self.js.delete_consumer(self.stream, name)
            except Exception:  # gone already, or NATS trouble: it goes after a minute idle anyway
                pass

    async def read(self, from_seq: int = 1, until_seq: int | None = None, subject: str | None = None):
        """Events from `from_seq` up to the end as it was when the read began (or `until_seq`)."""
        end = await self.last_seq() if until_seq is None else until_seq
        if end < from_seq:
            return
        async for stored in self.follow(from_seq, subject, stop_at=end):
            yield stored

    async def follow(self, from_seq: int = 1, subject: str | None = None, stop_at: int | None = None):
        """Every event from `from_seq` on, then the live tail (forever unless `stop_at`)."""
        async for batch in self.follow_raw(from_seq, subject, stop_at):
            for seq, subj, data, headers in batch:
                yield StoredEvent(seq, subj, decode_event(data), headers)

    async def follow_raw(self, from_seq: int = 1, subject: str | None = None,
                         stop_at: int | None = None, linger_s: float = 0.0, headers: bool = True,
                         decoded: bool = False, drop_dead: bool = False, range_end: int | None = None):
        """Batches of (seq, subject, payload, headers) as they arrive, with no decoding.

        What is stored when the call starts is read with `shared.fastread` (a pull consumer over a
        connection of its own, frames parsed in place: several times nats-py's rate); the rest, and
        everything when that cannot be used, with an ordered push consumer, the fastest way nats-py
        reads a stream (DESIGN.md), batching whatever arrived between two wake-ups. With
        `linger_s` (and no `stop_at`), the live tail comes in bursts instead, a pull every
        `linger_s` (`shared.paced`): for followers that need not see each event at once.
        `headers=False`, for readers that never look at headers: the stored range's are left unread
        (empty dicts; every message a service appends has some, and parsing them cost more than
        the rest of reading the frame), and the live tail's deliveries are taken as they are parsed
        (`shared.direct_tail`: no `Msg`, queue or task per message).
        `decoded=True` (with `headers=False`), for a fold that looks at nothing but the events: a
        long stored range read ahead by a helper process comes as `shared.readahead.DecodedRows`
        ((seq, event) pairs the helper decoded and admitted), the rest as rows. `drop_dead` (with
        `decoded`), for a fold that drops ended claims (the allocator's): without the events of
        claims released later in the range that change nothing but the claim (`readahead.DecodedFrames`).
        `range_end`: the stored range read as such ends there at most (a catch-up's end, taken
        before this call: the log may have grown since), the rest comes as the live tail does.
        """
        end = await self.last_seq() if stop_at is None else stop_at
        if range_end is not None:
            end = min(end, range_end)
        if end - from_seq + 1 >= FAST_READ_MIN:
            position = [from_seq]  # where the ordered consumer takes over
            # closed with this generator, not when collected: a read-ahead helper ends with it
            async with contextlib.aclosing(self._read_range(from_seq, end, subject, position,
                                                            headers, decoded, drop_dead)) as stored:
                async for batch in stored:
                    yield batch
            from_seq = position[0]
            if stop_at is not None and from_seq > stop_at:
                return
        if linger_s > 0 and stop_at is None:
            async for batch in PacedTail(self.nc, self.stream, subject, linger_s, headers).batches(from_seq):
                yield batch
            return
        if not headers and stop_at is None:  # the live tail of a fold: taken as parsed (direct_tail.py)
            async for batch in DirectTail(self.nc, self.stream, subject or subjects.EVENTS).batches(from_seq):
                yield batch
            return
        async for batch in self._follow_ordered(from_seq, subject, stop_at):
            yield batch

    async def _read_range(self, from_seq: int, end: int, subject: str | None, position: list[int],
                          headers: bool = True, decoded: bool = False, drop_dead: bool = False):
        """Yield [from_seq, end] through `shared.fastread`; `position[0]` ends as the first sequence
        not covered (from_seq when it could not be used, end + 1 when it read everything)."""
        try:
            if not headers and end - from_seq + 1 >= readahead.READ_AHEAD_MIN:  # a long catch-up
                reader = await readahead.open_read_ahead(self.nc, self.stream, from_seq, end, subject,
                                                         decoded, drop_dead)
            else:
                reader = await open_range_reader(self.nc, self.stream, from_seq, end, subject, headers)
            if reader is None:
                return
            async with contextlib.aclosing(reader.batches()) as batches:
                async for batch in batches:
                    position[0] = batch[-1][0] + 1
                    yield batch
            position[0] = end + 1
        except (RangeReadError, OSError, APIError) as err:  # nats-py's path still works
            log.warning("fast range read stopped at seq %d (%s): reading on through nats-py",
                        position[0], err)

    async def _follow_ordered(self, from_seq: int, subject: str | None, stop_at: int | None):
        arrivals = _Arrivals()
        last = [max(from_seq, 1) - 1]  # the last stream sequence handed over

        async def on_msg(msg) -> None:
            arrivals.put(msg)

        async def subscribe():
            config = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                                        opt_start_seq=last[0] + 1)
            return await self.js.subscribe(subject or subjects.EVENTS, cb=on_msg, ordered_consumer=True,
                                           config=config, stream=self.stream, idle_heartbeat=5.0)

        try:
            sub = await subscribe()
        except BaseException:
            arrivals.close()
            raise
        reconnects = _reconnects(self.nc)
        try:
            if stop_at is not None and arrivals.queue.empty() and await _nothing_pending(sub):
                return
            while True:
                msgs = await arrivals.next()
                if msgs is None:  # quiet for a while: after a reconnect, a consumer of our own again
                    now = _reconnects(self.nc)
                    if now != reconnects and self.nc.is_connected:
                        sub, renewed = await _resubscribe(sub, subscribe)
                        reconnects = now if renewed else reconnects
                    elif self.nc.is_connected and not await _consumer_alive(sub):
                        sub, _ = await _resubscribe(sub, subscribe)
                    continue
                batch, done = [], False
                for msg in msgs:
                    seq, left = jsreply.seq_and_pending(msg)
                    if seq <= last[0]:  # the old consumer and the new one overlap after a resubscribe
                        continue
                    if stop_at is not None and seq > stop_at:
                        done = True
                        break
                    batch.append((seq, msg.subject, msg.data, dict(msg.headers or {})))
                    last[0] = seq
                    if stop_at is not None and (seq >= stop_at or left == 0):
                        done = True
                        break
                if batch:
                    yield batch
                if done:
                    return
        finally:
            arrivals.close()
            try:
                await sub.unsubscribe()
            except Exception:  # connection closing: the consumer goes away with it
                pass


QUIET_S = 1.0  # a follower with nothing for this long checks whether its connection came back
QUIET_TICKS = 4  # ... looked at this often a QUIET_S: it checks after QUIET_S to 1.25 QUIET_S


class _Arrivals:
    """An ordered consumer's messages as they arrive, and a quiet mark (None) once nothing came
    for QUIET_S: one timer every QUIET_S / QUIET_TICKS for the whole follow, where `wait_for` on
    the queue made a task and a timer at every wait (at moderate rates once per message, in every
    follower: the allocator, the claim service)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._heard, self._silent = False, 0
        self._timer = self._loop.call_later(QUIET_S / QUIET_TICKS, self._tick)

    def put(self, msg) -> None:
        self._heard = True
        self.queue.put_nowait(msg)

    def _tick(self) -> None:
        self._silent = 0 if self._heard else self._silent + 1
        self._heard = False
        if self._silent >= QUIET_TICKS:
            self._silent = 0
            if self.queue.empty():
                self.queue.put_nowait(None)
        self._timer = self._loop.call_later(QUIET_S / QUIET_TICKS, self._tick)

    async def next(self) -> list | None:
        """What arrived (waiting for at least one message), or None after QUIET_S of nothing."""
        queue = self.queue
        first = await queue.get()
        msgs = [] if first is None else [first]
        while not queue.empty():
            msg = queue.get_nowait()
            if msg is not None:
                msgs.append(msg)
        return msgs or None

    def close(self) -> None:
        self._timer.cancel()


def _reconnects(nc) -> int:
    return nc.stats.get("reconnects", 0)


async def _resubscribe(sub, subscribe):
    """After a reconnect (a restarted server has lost our consumer), a new ordered consumer from
    the last sequence handed over: nats-py's own would come back only after two missed idle
    heartbeats (10 s), and the fold would judge on what it had not read meanwhile."""
    try:
        await sub.unsubscribe()
    except Exception:  # the old consumer may be gone with the server
        pass
    try:
        return await subscribe(), True
    except TRANSIENT_ERRORS as err:
        log.warning("following again after a reconnect failed (%s); trying again", err)
        return sub, False


async def _consumer_alive(sub) -> bool:
    """False when the server no longer has our consumer: in a cluster it may have lived on a
    server that died (the log's leader) while our own connection, to another server, never
    dropped, so no reconnect tells us; nats-py would notice only after two missed heartbeats.
    NATS trouble (an election still running) is not a verdict: asked again on the next quiet."""
    try:
        await sub.consumer_info()
    except NotFoundError:
        return False
    except Exception:
        return True
    return True


async def _nothing_pending(sub) -> bool:
    try:
        info = await sub.consumer_info()
    except Exception:
        return False
    # consumer_seq counts what this consumer delivered; with a subject filter the stream sequence
    # moves past messages of other subjects, so it cannot tell "nothing delivered"
    return info.num_pending == 0 and info.delivered.consumer_seq == 0


def _actual_seq(description: str | None) -> int | None:
    match = _ACTUAL.search(description or "")
    return int(match.group(1)) if match else None


__all__ = ["JetStreamEventLog", "connect", "ensure_streams", "subject_matches"]
