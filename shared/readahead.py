"""Reading a long stored range in a helper process, while the caller folds what came before.

A catch-up read its range (frames cut out of the socket, `shared.fastread`) and folded it (decode,
admit, fold) one after the other in one process: for a 1M-event log about 1 s of cutting frames
and 5 s of folding on one core, while the other served nats-server's side of the read and then
idled. For a range of READ_AHEAD_MIN messages or more, `open_read_ahead` hands most of the read to
a helper process (`python -m shared.readahead`): it cuts the frames and writes the rows down a
pipe, one msgpack frame per batch, while the caller folds the batch before. The caller only
decodes those rows (about 0.2 us a message, against 1.2-1.5 to cut them out of the socket). The
helper also decodes each row and asks the writer-authority table about it, and marks the rows it
admits (`AdmittedRows`): the caller's fold skips that check for them (5-8 % of a catch-up), and
reads every other row in full, so what is refused is counted and logged there as before. The
first HEAD messages are read here, in the caller, while the helper starts (0.2-0.3 s).

A caller that folds every row and looks at nothing else (the allocator's catch-up, `decoded=True`)
gets the helper's rows decoded instead (`DecodedRows`): the helper sends the payloads of the rows it
admitted as one JSON array, which the caller decodes with one call of the same strict decoder into
(seq, event) pairs, with no row, subject, payload or header dict made per message, no decoder call
per message, and no authority check; the other rows come as (seq, subject, payload) for the
caller's full read. The fold's work per message is what limits a catch-up on two cores (the helper
and nats-server share the other), so what the caller no longer does is what the catch-up gains.

The helper reads with `shared.fastread`'s RangeReader over a consumer made here, with the
caller's own connection's address and credentials (handed over its stdin, never its command
line). It writes at most a pipe's worth ahead of the caller (a write blocks while the pipe is
full, and the reader stops pulling meanwhile), so what is read ahead stays a few MB. A helper that
fails or exits before the end raises RangeReadError after the last row it delivered, so the caller
reads on through nats-py from there, as after any range read that stops; a helper that cannot be
started leaves the whole range to the caller's own reader. Only for readers that never look at
headers (a follower's catch-up): the rows carry empty header dicts.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import fcntl
import gc
import json
import logging
import os
import struct
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Union

import msgspec

from schemas import authority
from schemas import events as ev
from schemas import lenient
from shared.fastread import RangeReader, RangeReadError, open_range_reader

READ_AHEAD_MIN = 50_000  # stored messages; below this a helper's start costs more than it saves
HEAD = 32_768  # messages read by the caller itself while the helper starts (0.2-0.3 s)
PIPE_SIZE = 1 << 20  # asked of the kernel (Linux's default pipe-max-size): a batch or so ahead
AHEAD_BYTES = 4 << 20  # taken out of the pipe ahead of the fold at most (then the helper waits)
_READ = 1 << 20
_FRAME = struct.Struct("<cI")  # kind, length of what follows
BATCH, DECODED, END, FAILED = b"B", b"D", b"E", b"X"
_ROWS = msgspec.msgpack.Decoder(tuple[list[tuple[int, str, bytes, dict[str, str]]], bytes])
# a DECODED frame: the admitted rows' sequences, their payloads as one JSON array, the other rows
# (their index in the batch, seq, subject, payload), every row's subject in order as msgpack bytes
# decoded only by a caller that needs them (`DecodedRows.subjects`; none with `drop_dead`), the
# indexes of the rows left out, and how many were sent in part (`DecodedFrames`)
_DECODED = msgspec.msgpack.Decoder(tuple[list[int], bytes, list[tuple[int, int, str, bytes]], bytes, list[int], int])
_SUBJECTS = msgspec.msgpack.Decoder(list[str])
_ENCODE = msgspec.msgpack.Encoder().encode
# the strict decoder, over a whole array (and the helper's unchecked submits: `DecodedFrames`)
_EVENTS = msgspec.json.Decoder(list[Union[ev.AnyEvent, lenient.unchecked_submits()]])
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
log = logging.getLogger("gpuledger.eventlog")
# the last helper's read, as the caller saw it (`bench.replay_child` reports it): how long the
# caller waited for the helper's frames (the helper's side was the slower then), the first frame
# among them, and when the helper had written its last frame (`time.perf_counter`: CLOCK_MONOTONIC,
# one clock for both processes; what the caller folds after it is the read's tail)
last_read = {"waited_s": 0.0, "first_waited_s": 0.0, "ended_at": 0.0}
_END_AT = struct.Struct("<d")  # an END frame's body: when the helper wrote it


async def open_read_ahead(nc, stream: str, from_seq: int, until_seq: int,
                          subject: str | None = None, decoded: bool = False,
                          drop_dead: bool = False) -> "ReadAhead | None":
    """A reader of [from_seq, until_seq] whose batches past the first HEAD messages a helper
    process reads, or None where `shared.fastread` cannot be used at all (as `open_range_reader`).
    `decoded`: the helper's batches come as `DecodedRows` (the head's as rows all the same);
    with `drop_dead`, without the events of claims released later (`DecodedFrames`)."""
    split = from_seq + HEAD
    head = await open_range_reader(nc, stream, from_seq, min(until_seq, split - 1), subject, headers=False)
    if head is None:
        return None
    rest = None
    if until_seq >= split:
        try:
            rest = await open_range_reader(nc, stream, split, until_seq, subject, headers=False)
        except BaseException:
            await head.close()
            raise
    return ReadAhead(head, rest, decoded, drop_dead)


class ReadAhead:
    def __init__(self, head: RangeReader, rest: RangeReader | None, decoded: bool = False,
                 drop_dead: bool = False):
        self.head, self.rest, self.drop_dead = head, rest, drop_dead
        # decoded rows need the strict decoder's result to be the stored event itself: not where
        # an event type has upcasters (`schemas.events.decode_event` rewrites the payload first)
        self.decoded = decoded and not ev.upcasts.EVENT_KINDS
        self.helper: asyncio.subprocess.Process | None = None

    async def batches(self) -> AsyncIterator[list[tuple[int, str, bytes, dict[str, str]]]]:
        """Batches of (seq, subject, payload, {}) in stream order: the head's read here, the rest's
        read by the helper (started first, so that it starts while the head is read)."""
        pipe = None
        try:
            if self.rest is not None and not self.rest.empty:
                pipe = await self._start_helper(self.rest)
            async for batch in self.head.batches():
                yield batch
            if self.rest is None:
                return
            source = _helper_batches(pipe, self.helper) if pipe is not None else self.rest.batches()
            async for batch in source:
                yield batch
        finally:
            if pipe is not None:
                pipe.close()
            await self._stop_helper()
            await self.head.close()
            if self.rest is not None:
                await self.rest.close()  # deletes its consumer (the helper's connection is gone)

    async def _start_helper(self, rest: RangeReader) -> "_Pipe | None":
        """The helper process reading `rest`, and the read end of its pipe; None if it could not
        be started (the caller then reads `rest` itself)."""
        read_fd, write_fd = os.pipe()
        try:
            fcntl.fcntl(write_fd, _F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:  # a smaller pipe only means less is read ahead
            pass
        params = {"host": rest.host, "port": rest.port, "auth": rest.auth, "stream": rest.stream,
                  "consumer": rest.consumer, "inbox": rest.inbox, "until_seq": rest.until_seq,
                  "decoded": self.decoded, "drop_dead": self.drop_dead}
        try:
            self.helper = await asyncio.create_subprocess_exec(
                sys.executable or "python3", "-m", "shared.readahead", stdin=asyncio.subprocess.PIPE,
                stdout=write_fd, env=_helper_env())
            self.helper.stdin.write(json.dumps(params).encode() + b"\n")
            await self.helper.stdin.drain()
            self.helper.stdin.close()
        except (OSError, ValueError) as err:
            log.warning("could not start the read-ahead helper (%s): reading the range here", err)
            os.close(read_fd)
            await self._stop_helper()
            return None
        finally:
            os.close(write_fd)
        os.set_blocking(read_fd, False)
        return _Pipe(read_fd)

    async def _stop_helper(self) -> None:
        helper, self.helper = self.helper, None
        if helper is None:
            return
        if helper.returncode is None:
            try:
                helper.kill()
            except ProcessLookupError:
                pass
        await helper.wait()


def _helper_env() -> dict[str, str]:
    """The caller's environment, with this package's root first on the path (a tree run from
    elsewhere, as `bench` compares them, gets its own helper)."""
    root = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, path]) if path else root}


async def _helper_batches(pipe: "_Pipe", helper) -> AsyncIterator[list]:
    last_read.update(waited_s=0.0, first_waited_s=0.0, ended_at=0.0)
    first = True
    while True:
        kind, body = await pipe.frame()
        if first:
            last_read["first_waited_s"], first = pipe.waited, False
        if kind == DECODED:
            rows = decoded_rows(body)
            if rows:
                yield rows
        elif kind == BATCH:
            rows, admitted = _ROWS.decode(body)
            if rows:
                yield AdmittedRows(rows, admitted)
        elif kind == END:
            last_read["waited_s"] = pipe.waited
            last_read["ended_at"] = _END_AT.unpack(body)[0] if len(body) == _END_AT.size else 0.0
            await helper.wait()
            return
        elif kind is None:
            status = await helper.wait()
            raise RangeReadError(f"the read-ahead helper exited (status {status}) before the range's end")
        else:
            raise RangeReadError(f"the read-ahead helper stopped: {bytes(body).decode(errors='replace')}")


class AdmittedRows(list):
    """A batch of rows as any range read gives them, with `admitted[i]` 1 where the helper decoded
    row i with the strict types and the writer-authority table admitted it on its subject (the
    same code the caller's fold runs: `ledger.follower` then skips that check for it), 0 where the
    caller must read it in full (undecodable, lenient, refused: counted and logged there)."""

    __slots__ = ("admitted",)

    def __init__(self, rows: list, admitted: bytes):
        super().__init__(rows)
        self.admitted = admitted if len(admitted) == len(rows) else bytes(len(rows))


class DecodedRows(list):
    """A batch the helper decoded, in stream order: (seq, event) for each row it decoded with the
    strict types and the writer-authority table admitted on its subject (the checks the caller's
    fold makes: `ledger.follower` folds these as they are), (seq, subject, payload) for each other
    row, which the caller reads in full (undecodable, lenient, refused: counted and logged there).
    `raw` says how many rows are of the second kind (0 nearly always); `subjects()` every row's
    subject, for a reader that needs them after all. Where the helper left out the events of claims
    released later (`DecodedFrames`, `drop_dead`), `gone` holds the indexes of the stored rows left
    out and `rewritten` counts those sent in part; such a batch carries no subjects (its reader
    folds and nothing else: `ledger.follower` asks for it only then)."""

    __slots__ = ("raw", "_subjects", "gone", "rewritten")

    def __init__(self, rows: list, raw: int, subjects: bytes | list[str] = b"\x90", gone: list | None = None,
                 rewritten: int = 0):
        super().__init__(rows)
        self.raw, self._subjects, self.gone, self.rewritten = raw, subjects, gone or [], rewritten

    def subjects(self) -> list[str]:
        if isinstance(self._subjects, (bytes, bytearray, memoryview)):
            if not self._subjects:
                raise RuntimeError("a batch read ahead without the events of claims released later "
                                   "(drop_dead) reached a reader that needs every event: a follower "
                                   "that drops ended claims must have its listeners before it runs")
            self._subjects = _SUBJECTS.decode(self._subjects)
        if len(self._subjects) != len(self):
            raise RangeReadError("the read-ahead helper's decoded batch lacks its rows' subjects")
        return self._subjects


def decoded_rows(body) -> DecodedRows:
    """A DECODED frame's batch. The array holds only payloads the helper's strict decoder took one
    by one, so it decodes whole; if it ever did not, the read stops here (RangeReadError) and the
    caller reads on through nats-py from the last row it folded."""
    try:
        seqs, events, raw, subjects, gone, rewritten = _DECODED.decode(body)
        events = _EVENTS.decode(events)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise RangeReadError(f"the read-ahead helper's decoded batch did not decode: {err}") from err
    if len(events) != len(seqs):
        raise RangeReadError("the read-ahead helper's decoded batch has more sequences than events")
    rows = DecodedRows(zip(seqs, events), len(raw), subjects, gone, rewritten)
    for index, seq, subject, data in raw:  # in index order: each lands where it was read
        # (an index counts the stored rows: those left out before it are not here)
        rows.insert(index - bisect.bisect_left(gone, index) if gone else index, (seq, subject, data))
    return rows


class _Pipe:
    """Frames from the helper's pipe. Every frame asked for first takes what the pipe holds
    (without waiting, up to AHEAD_BYTES unread here), so the helper can fill it again while the
    caller folds; never more, or a helper faster than the fold would have the whole range read
    into this buffer."""

    def __init__(self, fd: int):
        self.fd, self.buf, self.pos, self.eof = fd, bytearray(), 0, False
        self.waited = 0.0  # seconds spent waiting for the helper to write

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    async def frame(self) -> tuple[bytes | None, bytearray]:
        """(kind, body) of the next frame; (None, empty) once the pipe closed between frames."""
        need = _FRAME.size
        self._drain(need)
        while True:
            have = len(self.buf) - self.pos
            if have >= _FRAME.size:
                kind, size = _FRAME.unpack_from(self.buf, self.pos)
                need = _FRAME.size + size
                if have >= need:
                    start = self.pos + _FRAME.size
                    self.pos = start + size
                    return kind, self.buf[start:self.pos]
            if self.eof:
                if have:
                    raise RangeReadError("the read-ahead helper's last frame was cut short")
                return None, bytearray()
            await self._readable()
            self._drain(need)

    def _drain(self, need: int) -> None:
        """Read what the pipe holds, until AHEAD_BYTES are unread here (or `need`, if more)."""
        if self.pos and self.pos * 2 >= len(self.buf):  # keep the buffer to what is unread
            del self.buf[:self.pos]
            self.pos = 0
        most = max(AHEAD_BYTES, need)
        while not self.eof and len(self.buf) - self.pos < most:
            try:
                data = os.read(self.fd, _READ)
            except BlockingIOError:
                return
            if not data:
                self.eof = True
                return
            self.buf += data

    async def _readable(self) -> None:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(self.fd, lambda: ready.done() or ready.set_result(None))
        since = time.perf_counter()
        try:
            await ready
        finally:
            loop.remove_reader(self.fd)
            self.waited += time.perf_counter() - since


# --- the helper process ------------------------------------------------------------------------


async def _serve(params: dict, out: int) -> int:
    reader = RangeReader(None, params["stream"], params["consumer"], params["host"], params["port"],
                         params["auth"], params["until_seq"], headers=False)
    reader.inbox = params["inbox"]
    encode = msgspec.msgpack.Encoder().encode
    decoded = params.get("decoded", False)
    frames = DecodedFrames(params.get("drop_dead", False), until_seq=params["until_seq"])
    try:
        async for batch in reader.batches():
            if decoded:
                for body in frames.add(batch):
                    _write(out, DECODED, body)
            else:
                _write(out, BATCH, encode((batch, _admitted(batch))))
        for body in frames.finish():
            _write(out, DECODED, body)
    except BrokenPipeError:  # the caller stopped reading: nothing to tell it
        return 1
    except Exception as err:
        _write(out, FAILED, f"{type(err).__name__}: {err}".encode())
        return 1
    _write(out, END, _END_AT.pack(time.perf_counter()))
    return 0


def _admitted(batch: list) -> bytes:
    """1 for each row the caller's fold may take without its writer-authority check: decoded by
    the strict types and admitted on its subject (`schemas.authority`, as `ledger.follower` asks)."""
    decode, admit_of, refuse = ev.event_decoder(), authority.ADMIT, authority.admits
    marks = bytearray(len(batch))
    for i, (_seq, subject, data, _headers) in enumerate(batch):
        try:
            event = decode(data)
        except Exception:  # the caller reads it in full (leniently, or counts it undecodable)
            continue
        if admit_of.get(type(event), refuse)(subject, event):
            marks[i] = 1
    return bytes(marks)


def _decoded(batch: list) -> tuple[list[int], bytes, list, bytes, list[int], int]:
    """A DECODED frame's parts, nothing dropped (`DecodedFrames` without `drop_dead`)."""
    frames = DecodedFrames(False)
    return frames._parts(frames._read(batch))


# fold only their claim's own fields (`ledger.evolve`: status allocated -> bound, env, lease and
# activity times, history), which nothing else folded reads apart from whether the claim is live
_PRIVATE = (ev.ClaimBound, ev.LeaseRenewed, ev.ClaimActivity)
LOOKAHEAD = 32_768  # messages read past a batch before its frame is sent (when dropping dead events)
RAMP = 4_096  # ... at first: then as many as were sent, up to LOOKAHEAD
_BATCH_HEAD = b'{"type":"EventBatch"'  # how an EventBatch's payload starts (the tag first)
_UNCHECKED_HEAD = b'{"type":"' + lenient.UNCHECKED_SUBMITS.encode() + b'"'


class DecodedFrames:
    """The helper's DECODED frames, batch after batch: each row decoded with the strict types and
    asked the authority table about (the caller's own checks), the admitted rows' payloads joined
    into one JSON array, the others as they are.

    `drop_dead` (a caller that drops ended claims, the allocator's catch-up: `keep_ended=False`):
    a batch's frame waits until LOOKAHEAD more messages were read, and events that only change
    their own claim's fields (`_PRIVATE`: bindings, renewals, activity) are left out where an
    admitted ClaimReleased of that claim comes later in what was read; submits of such claims are
    sent as unchecked submits (their pattern checks made here already). Such a release ends the
    claim for good (a submit of an ended id is a repeat), or finds no claim, in which case the
    events left out found none either; an ended claim leaves the caller's state, so nothing those
    events wrote survives into it. A third of a replay's messages are bindings of claims released
    later, and each cost the caller its decode and fold. Such frames carry no subjects: a caller
    that would have to show every event after all (a listener added once the catch-up began) is
    stopped with an error (`DecodedRows.subjects`) rather than shown some of them. The last row of
    a batch is never left out: its sequence is the batch's position."""

    def __init__(self, drop_dead: bool, lookahead: int = LOOKAHEAD, until_seq: int = 0):
        self.drop_dead, self.lookahead = drop_dead, lookahead
        self.until_seq = until_seq  # the range's last sequence, where known (0: not)
        self.decode, self.admit_of, self.refuse = ev.event_decoder(), authority.ADMIT, authority.admits
        self.waiting: collections.deque = collections.deque()  # read batches, their frames not sent
        self.waiting_rows = 0  # rows in `waiting`
        self.sent = 0  # rows whose frames were sent
        self.released: dict[str, int] = {}  # claim id -> sequence of its last admitted release read
        self.release_order: collections.deque = collections.deque()  # (seq, claim id), as read

    def add(self, batch: list) -> list[bytes]:
        """The frames ready once `batch` (rows in stream order) was read."""
        read = self._read(batch)
        if not self.drop_dead:
            return [_ENCODE(self._parts(read))]
        self.waiting.append(read)
        self.waiting_rows += len(batch)
        ready = []
        # the lookahead grows with what was sent (from RAMP): the caller, which reads the range's
        # head itself meanwhile, is not kept waiting for a whole LOOKAHEAD at the start
        ahead = min(self.lookahead, max(self.sent, RAMP))
        # ... and shrinks near the range's end: a batch goes once half the way from it to the end
        # is read. Otherwise the last LOOKAHEAD messages would all wait for the end to be read,
        # and the caller fold them only then, after the helper is done (0.25-0.3 s of a 1M-event
        # rebuild's critical path); now only the last batch or two do. A claim of those batches
        # released further on is then folded in full (as any claim whose release was not read)
        end = self.until_seq
        last = batch[-1][0] if end and batch else 0
        while self.waiting and (self.waiting_rows - len(self.waiting[0][0]) >= ahead
                                or (last and _nearer_the_end(self.waiting[0][0], last, end))):
            oldest = self.waiting.popleft()
            self.waiting_rows -= len(oldest[0])
            self.sent += len(oldest[0])
            ready.append(self._frame(oldest))
            ahead = min(self.lookahead, max(self.sent, RAMP))
        return ready

    def finish(self) -> list[bytes]:
        """The frames still waiting, once the range is read."""
        ready = []
        while self.waiting:
            ready.append(self._frame(self.waiting.popleft()))
        return ready

    def _read(self, batch: list) -> tuple[list, bytearray, list]:
        """(the batch, each row's kind, each row's key): `_RAW` for a row the caller reads in full
        (undecodable, or not admitted on its subject), `_KEEP` for one sent as stored, and with
        `drop_dead` the kinds `_frame` may leave out or send in part, keyed by their claim ids (the
        decoded event itself only for a batch with a binding, renewal or activity among other
        events: the events are not kept while the lookahead waits). Admitted releases noted."""
        decode, admit_of, refuse, drop = self.decode, self.admit_of, self.refuse, self.drop_dead
        released, order, released_kind = self.released, self.release_order.append, ev.ClaimReleased
        kinds, keys = bytearray(len(batch)), [None] * len(batch) if drop else None
        for i, (seq, subject, data, _headers) in enumerate(batch):
            try:
                event = decode(data)
            except Exception:  # the caller reads it in full (leniently, or counts it undecodable)
                continue
            kind = type(event)
            if not admit_of.get(kind, refuse)(subject, event):
                continue
            kinds[i] = _KEEP
            if not drop:
                continue
            if kind is released_kind:
                released[event.claim_id] = seq
                order((seq, event.claim_id))
            elif kind in _PRIVATE:
                kinds[i], keys[i] = _ONE_PRIVATE, event.claim_id
            elif kind is ev.ClaimSubmitted:
                kinds[i], keys[i] = _ONE_SUBMIT, event.claim.claim_id
            elif kind is ev.EventBatch:
                members = event.events
                for member in members:
                    if type(member) is released_kind:
                        released[member.claim_id] = seq
                        order((seq, member.claim_id))
                if all(type(m) is ev.ClaimSubmitted for m in members):
                    if members and data.startswith(_BATCH_HEAD):
                        kinds[i], keys[i] = _SUBMITS, [m.claim.claim_id for m in members]
                elif any(type(m) in _PRIVATE for m in members):
                    kinds[i], keys[i] = _MIXED, event
        return batch, kinds, keys

    def _frame(self, read: tuple) -> bytes:
        batch = read[0]
        if batch:  # a release before this batch cannot end a claim after any of its rows
            first, released, order = batch[0][0], self.released, self.release_order
            while order and order[0][0] < first:
                seq, claim_id = order.popleft()
                if released.get(claim_id) == seq:
                    del released[claim_id]
        return _ENCODE(self._parts(read, True))

    def _parts(self, read: tuple, slim: bool = False) -> tuple[list[int], bytes, list, bytes, list[int], int]:
        """The frame's parts: the admitted rows' sequences and payloads (one JSON array), the other
        rows (index, seq, subject, payload), all subjects (msgpack; none when leaving events out),
        the indexes of the rows left out, how many rows were sent in part. With `slim`: a binding,
        renewal or activity of a claim released later is left out, submits of such claims only are
        sent as unchecked submits (`schemas.lenient.unchecked_submits`: read without the pattern
        checks made here already), a batch without its members of the first kind."""
        batch, kinds, keys = read
        released = self.released
        seqs, payloads, raw, gone, rewritten = [], [], [], [], 0
        last = len(batch) - 1
        for i, (seq, subject, data, _headers) in enumerate(batch):
            kind = kinds[i]
            if kind == _RAW:
                raw.append((i, seq, subject, data))
                continue
            if kind != _KEEP and slim and i != last:
                key = keys[i]
                if kind == _ONE_PRIVATE:
                    if released.get(key, 0) > seq:
                        gone.append(i)
                        continue
                elif kind == _ONE_SUBMIT:
                    if released.get(key, 0) > seq:
                        data = _UNCHECKED_HEAD + b',"events":[' + data + b"]}"
                        rewritten += 1
                elif kind == _SUBMITS:
                    for claim_id in key:
                        if released.get(claim_id, 0) <= seq:
                            break
                    else:  # the same members, read unchecked
                        data = _UNCHECKED_HEAD + data[len(_BATCH_HEAD):]
                        rewritten += 1
                else:  # _MIXED
                    members = key.events
                    kept = [m for m in members if type(m) not in _PRIVATE or released.get(m.claim_id, 0) <= seq]
                    if not kept:
                        gone.append(i)
                        continue
                    if len(kept) != len(members):
                        data = ev.encode_event(msgspec.structs.replace(key, events=kept))
                        rewritten += 1
            seqs.append(seq)
            payloads.append(data)
        subjects = b"" if slim else _ENCODE([row[1] for row in batch])
        return seqs, b"[" + b",".join(payloads) + b"]", raw, subjects, gone, rewritten


def _nearer_the_end(batch: list, last: int, end: int) -> bool:
    """Whether what was read past `batch` (up to sequence `last`) is half or more of what lies
    between it and the range's `end`."""
    return bool(batch) and 2 * last >= end + batch[-1][0]


_RAW, _KEEP, _ONE_PRIVATE, _ONE_SUBMIT, _SUBMITS, _MIXED = range(6)  # a row's kind (`DecodedFrames._read`)


def _write(out: int, kind: bytes, body: bytes) -> None:
    """One frame, written whole (blocking while the pipe is full: the caller is behind)."""
    data = memoryview(_FRAME.pack(kind, len(body)) + body)
    while data:
        data = data[os.write(out, data):]


def main() -> int:
    params = json.loads(sys.stdin.readline())
    # what the helper holds (a lookahead of decoded events, `DecodedFrames`) forms no cycles: the
    # collector would only scan it again and again (a third of the helper's CPU)
    gc.disable()
    out = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print must not corrupt a frame
    os.set_blocking(out, True)
    return asyncio.run(_serve(params, out))


if __name__ == "__main__":
    sys.exit(main())
