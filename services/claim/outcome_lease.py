"""Which claim-service replica writes the outcomes: the one whose checkpoints nats-server takes.

Every replica folds the log and could write every claim's outcome (the same message: outcomes are
built from the log alone), and before session 34 every one did: the outcome stream took each
write once per replica, and each replica's outcome groups (two acks a group, ack_window.py) failed
their check whenever the other's messages fell between their ends, and were written again. Now
one writes at a time. The writer's checkpoint (`gpu.outcome.checkpoint`: every outcome of the
ledger up to its `seq` is stored) is its lease: written at least every `renew_s`, each on condition
that the subject's last sequence is the writer's previous checkpoint
(`Nats-Expected-Last-Subject-Sequence`). A replica that finds the checkpoint moving stands by: it
folds and notes changes as the writer does, forgets those the writer's checkpoints cover, and
writes nothing. Once the checkpoint has stood still for `lease_s` (the writer stopped), it takes
over with a checkpoint conditioned on the last one it saw, and writes the outcomes of every change
after that one's `seq`; of two that try at once, nats-server takes one. A writer whose checkpoint
is refused (another took over while it was stalled) stands by.

A restarted replica takes over at once when the last checkpoint is from its own host (its
predecessor in the same pod, dead since this one runs): the outcomes wait for no lease after a
crash. Replicas on one host (tests, `gpuledger up`) then both try at once: one is refused.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
import time

from nats.errors import Error as NatsError
from nats.js.errors import APIError, NotFoundError

from schemas import subjects
from shared.eventlog import EXPECTED_LAST_SUBJECT_SEQ
from shared.jetstream import WRONG_LAST_SEQUENCE

log = logging.getLogger("gpuledger.claim.outcomes")
RENEW_S = 1.0  # the writer's checkpoint at least this often, changed or not
LEASE_S = 3.0  # a checkpoint standing still this long: its writer is gone


def writer_id() -> str:
    """This process, named by its host first (a restarted process in the same pod has the same)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _host(writer: str) -> str:
    return writer.split(":", 1)[0]


class OutcomeLease:
    def __init__(self, js, writer: str | None = None, lease_s: float = LEASE_S, renew_s: float = RENEW_S,
                 clock=time.monotonic):
        self.js = js
        self.writer = writer or writer_id()
        self.lease_s, self.renew_s, self.clock = lease_s, renew_s, clock
        self.held = False
        self.last_seq = 0  # the checkpoint subject's last stream sequence, as last written or seen
        self.last_value = 0  # that checkpoint's ledger sequence
        self.last_writer = ""
        self.lock = asyncio.Lock()  # one checkpoint write at a time: each is conditioned on the last
        self.lost = 0  # checkpoints refused (another replica writes)
        self.taken = 0  # times this replica took the lease

    async def look(self) -> bool:
        """The checkpoint as stored now; True if it moved since the last look or write."""
        try:
            msg = await self.js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.OUTCOME_CHECKPOINT)
        except NotFoundError:  # none yet, or the stream was made again: the next one is the first
            self.last_seq = 0
            return False
        if msg.seq == self.last_seq:
            return False
        body = json.loads(msg.data)
        self.last_seq, self.last_value = msg.seq, int(body.get("seq", 0))
        self.last_writer = str(body.get("writer", ""))
        return True

    def ours_before(self) -> bool:
        """The last checkpoint was written from this host (or by nobody, or before leases)."""
        return not self.last_writer or _host(self.last_writer) == _host(self.writer)

    async def write(self, value: int) -> bool:
        """A checkpoint at ledger sequence `value`, on condition of the last one this replica saw or
        wrote: True if stored (this replica holds the lease), False if another wrote since."""
        async with self.lock:
            body = json.dumps({"seq": value, "writer": self.writer}).encode()
            ack = await self._publish(body)
            if ack is None and self.held and self.last_seq:
                await self.look()
                if not self.last_seq:  # the subject emptied (the stream made again): nobody's
                    ack = await self._publish(body)
            if ack is None:
                if self.held:
                    log.error("outcomes: another claim-service replica writes them now (checkpoint "
                              "refused): this one stands by")
                self.held = False
                self.lost += 1
                return False
            if not self.held:
                self.taken += 1
                log.info("outcomes: this replica (%s) writes them from ledger sequence %d", self.writer, value)
            self.last_seq, self.last_value, self.last_writer, self.held = ack.seq, value, self.writer, True
            return True

    async def _publish(self, body: bytes):
        """The checkpoint on condition of `last_seq`: its ack, or None if the condition failed."""
        try:
            return await self.js.publish(subjects.OUTCOME_CHECKPOINT, body, stream=subjects.OUTCOMES_STREAM,
                                         headers={EXPECTED_LAST_SUBJECT_SEQ: str(self.last_seq)})
        except APIError as err:
            if err.err_code not in WRONG_LAST_SEQUENCE:
                raise
            return None

    async def wait_until_quiet(self, on_moved) -> None:
        """Stand by until the checkpoint has not moved for `lease_s`; `on_moved(value)` each time it
        has (the writer's outcomes are stored up to `value`)."""
        quiet_since = self.clock()
        said = False
        while self.clock() - quiet_since < self.lease_s:
            await asyncio.sleep(min(self.renew_s, self.lease_s) / 2)
            try:
                moved = await self.look()
            except (NatsError, asyncio.TimeoutError, OSError) as err:  # NATS trouble: look again
                log.debug("outcomes: checkpoint not read (%s)", err)
                continue
            if moved:
                quiet_since = self.clock()
                on_moved(self.last_value)
                if not said:
                    log.info("outcomes: %s writes them; this replica stands by", self.last_writer or "another")
                    said = True
