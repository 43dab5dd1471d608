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

A restarted replica takes over at once when the last checkpoint is from a process of its own host
that is gone (its predecessor in the same pod, or under `gpuledger up`): the outcomes wait for no
lease after a crash. Replicas that start at once with no checkpoint yet both try: one is refused.
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
    """This process: its host, its pid and when it started (a pid is reused: a restarted container's
    process is often pid 1 again), and a token of its own (replicas in one process, in tests)."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_started(pid)}:{secrets.token_hex(4)}"


def _started(pid: int) -> str:
    """When process `pid` started (clock ticks after boot, /proc/PID/stat), or "" where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def predecessor_gone(last: str, mine: str) -> bool:
    """Whether the writer `last` was a process on this host that is gone: this one's predecessor (a
    restart in the same pod, or under `gpuledger up`), whose lease need not be waited out. Another
    host's writer, a live one here, or a replica in this very process: not known to be gone."""
    if not last:
        return True  # nobody wrote a checkpoint yet (or one from before leases)
    try:
        host, pid, started, _token = last.split(":", 3)
        my_host, my_pid, my_started, _mine = mine.split(":", 3)
    except ValueError:
        return False
    if host != my_host or (pid, started) == (my_pid, my_started):
        return False
    return not started or _started(int(pid)) != started


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
        """The last checkpoint was written by nobody, or by a process of this host that is gone."""
        return predecessor_gone(self.last_writer, self.writer)

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
