"""Keeps each node's record of live claims (schemas.grants) equal to the allocator's fold.

The follower marks the nodes an event touched; this writes their records, at most one write in
flight per node (a node marked again meanwhile is written again once the first is acknowledged,
so a burst of changes costs one write, not one per change), compare-and-set on the revision of the
node's key: a write that finds another revision (a second allocator, an ack that was lost) reads
the record there and keeps whichever was folded further along. When the allocator starts (caught
up with the log), every record that differs from its fold is rewritten: so a crash between a
decision and its records loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from nats.js.errors import NotFoundError

from schemas import subjects
from schemas.grants import NodeGrants, decode_grants, encode_grants
from shared.eventlog import EXPECTED_LAST_SUBJECT_SEQ
from shared.jetstream import WRONG_LAST_SEQUENCE
from shared.latest import latest_per_subject
from shared.pipelined import PipelinedPublisher
from shared.retry import until_done

log = logging.getLogger("gpuledger.allocator")
RETRY_S = 0.5
ACK_CHECK_S = 1.0
HEADERS_ROOM = 4096  # the write's headers count against the server's max payload too
TOO_BIG_LOUD_EVERY = 100  # an oversized record is told the first time, then every 100th


class NodeRecordWriter:
    def __init__(self, nc, build: Callable[[str], NodeGrants]):
        self.nc, self.js, self.build = nc, nc.jetstream(), build
        self.publisher = PipelinedPublisher(nc)
        self.revision: dict[str, int] = {}  # node -> revision of its key we last saw (0: none)
        self.stored: dict[str, NodeGrants] = {}  # node -> the record at that revision
        self.dirty: dict[str, None] = {}
        self.writing: set[str] = set()
        self.wake = asyncio.Event()
        # True while the fold holds decisions not yet stored (the allocator's own batch in flight,
        # services/allocator/own_batch.py): no record is built from them, so no agent binds an
        # allocation the log may never hold, or one a release stored before the batch voids (a
        # pending claim's release is fenced on the decision subject, not on the node's fence)
        self.paused: Callable[[], bool] = lambda: False
        # True while a decision pass is about to run on claims that wait (a release or a submit
        # was folded and the allocator has not decided on it yet): the records of the nodes it
        # marked wait for that pass, whose allocations often land on the very node a release
        # freed, so the two changes go out as one write instead of two (`bench e2e` at 400/s:
        # about one write a claim). Unlike `paused`, lifted by `passed()` after each pass, so a
        # pass always due (saturation) never starves the records.
        self.pass_due: Callable[[], bool] = lambda: False
        self._after_pass = False
        self.ready = False  # the bucket loaded (`run`): only then may `passed` write
        self.writes = 0
        self.conflicts = 0
        self.held = 0
        self.too_big = 0  # records not written: past the server's max payload (`_fits`)
        self.too_big_nodes: set[str] = set()  # nodes whose latest record was not written for that

    def hold(self) -> None:
        """Write nothing until `release` (the allocator between its ClaimEnding marks and the fold
        of their batch, services/allocator/end_fence.py); what is marked meanwhile waits."""
        self.held += 1

    def release(self) -> None:
        self.held -= 1
        self.flush()

    async def passed(self) -> None:
        """A decision pass ended (its batch, if any, folded or given up): what waited for it is
        written now, in the allocator's loop, before its next pass can hold a batch again."""
        if self.ready and self.dirty:
            self._after_pass = True
            await self._write_dirty()

    def mark(self, nodes: Iterable[str]) -> None:
        for node in nodes:
            self.dirty[node] = None

    def flush(self) -> None:
        if self.dirty:
            self.wake.set()

    async def load(self) -> None:
        """What the bucket holds now (the revision and record of every node)."""
        found = await latest_per_subject(self.js, subjects.NODE_GRANTS_STREAM, [subjects.NODE_GRANTS])
        for _subject, (seq, data) in found.items():
            record = _decoded(data)
            if record is not None:
                self.revision[record.node], self.stored[record.node] = seq, record

    async def run(self, nodes: Callable[[], Iterable[str]]) -> None:
        """Load the bucket, rewrite what differs from the fold (`nodes`: every node it knows),
        then write what is marked, forever."""
        await self.publisher.start()
        try:
            # a start right after nats-server's (a kill -9 under load: its JetStream API answered
            # nothing for seconds) timed out making the reading consumer, and the allocator exited
            # (session 32): NATS trouble is waited out here, as everywhere else
            await until_done(self.load, "loading the node records")
            self.mark(nodes())
            self.flush()
            self.ready = True
            while True:
                # woken by a change, or now and then to give up on acks that never came (a timer
                # handle: `asyncio.wait_for` makes a task and a waiter for each of many waits)
                check = asyncio.get_running_loop().call_later(ACK_CHECK_S, self.wake.set)
                try:
                    await self.wake.wait()
                finally:
                    check.cancel()
                self.wake.clear()
                await self._write_dirty()
                self.publisher.expire()
        finally:
            await self.publisher.stop()

    async def _write_dirty(self) -> None:
        if not self._after_pass and self.pass_due():  # `passed()` wakes this again
            return
        for node in [n for n in self.dirty if n not in self.writing]:
            if self.held or self.paused():  # the allocator flushes again when it is over
                return
            if node in self.writing or node not in self.dirty:
                continue  # taken meanwhile by the other caller (the writer's task, `passed`)
            del self.dirty[node]
            record, stored = self.build(node), self.stored.get(node)
            if record.same_claims(stored) or (stored is not None and stored.through_seq > record.through_seq):
                continue  # unchanged, or written by an allocator further along the same log
            data = encode_grants(record)
            if not self._fits(node, record, data):
                continue
            self.writing.add(node)
            self.writes += 1
            await self.publisher.publish(
                subjects.node_grants(node), data,
                {EXPECTED_LAST_SUBJECT_SEQ: str(self.revision.get(node, 0))},
                lambda seq, code, why, node=node, record=record: self._acked(node, record, seq, code, why))
        self._after_pass = False

    def _fits(self, node: str, record: NodeGrants, data: bytes) -> bool:
        """Whether the record is one message nats-server takes. One record lists every claim
        live on its node, and nothing bounds their number: 20,000 CPU-only claims of 1 milli-CPU
        (or 8,000 shares of 1 milli-GPU on eight cards) made one past the 1 MB max payload, the
        write raised MaxPayloadError, the allocator exited, at every start again, and `up` stopped
        the stack for good (session 32). Now that node's record is left as it was (its agent binds
        no new claim there until enough end; the node is marked again by the next change) and
        every other node goes on."""
        limit = (getattr(self.nc, "max_payload", 0) or 1 << 20) - HEADERS_ROOM
        if len(data) <= limit:
            self.too_big_nodes.discard(node)
            return True
        self.too_big += 1
        self.too_big_nodes.add(node)
        if self.too_big % TOO_BIG_LOUD_EVERY == 1:
            log.error("node record of %s not written: its %d live claims make %d bytes, past what one "
                      "NATS message may hold (%d); its agent binds no new claim there until some end "
                      "(%d such records so far)", node, len(record.claims), len(data), limit, self.too_big)
        return False

    def _acked(self, node: str, record: NodeGrants, seq: int, code: int, why: str) -> None:
        self.writing.discard(node)
        if seq:
            self.revision[node], self.stored[node] = seq, record
        elif code in WRONG_LAST_SEQUENCE:
            self.conflicts += 1
            asyncio.ensure_future(self._reread(node))
            return
        else:
            log.warning("node record of %s not written (%s); retrying", node, why)
            asyncio.get_running_loop().call_later(RETRY_S, self._again, node)
            return
        if node in self.dirty:
            self.wake.set()

    def _again(self, node: str) -> None:
        self.mark((node,))
        self.flush()

    async def _reread(self, node: str) -> None:
        """Another revision is there: take it as the base and write again if ours is newer."""
        self.writing.add(node)
        try:
            msg = await self.js.get_last_msg(subjects.NODE_GRANTS_STREAM, subjects.node_grants(node))
            theirs = _decoded(msg.data)
            self.revision[node] = msg.seq
            if theirs is not None:
                self.stored[node] = theirs
        except NotFoundError:
            self.revision[node] = 0
        except Exception as err:  # NATS trouble: try the whole write again a little later
            log.warning("reading the node record of %s failed (%s)", node, err)
        finally:
            self.writing.discard(node)
        self._again(node)


def _decoded(data: bytes) -> NodeGrants | None:
    try:
        return decode_grants(data)
    except Exception as err:  # not ours to trust: overwritten by the next write for that node
        log.warning("ignoring an undecodable node record: %s", err)
        return None
