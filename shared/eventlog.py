"""The event log: one append-only stream, in JetStream or in memory, with the same behaviour.

Both implementations give: sequence numbers from 1, idempotent appends by message id (a retried
append returns the first one's sequence and `duplicate=True`), optimistic appends fenced by the
last sequence on a subject (raising `AppendConflict` with the actual sequence), reading from any
sequence, and following the tail. `tests/service/test_eventlog_contract.py` runs one test suite
against both.
"""

from __future__ import annotations

import asyncio
import fnmatch
from dataclasses import dataclass, field

from schemas.events import Event, decode_event, encode_event

MSG_ID = "Nats-Msg-Id"
EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
# nats-server 2.11+: the expected last sequence is that of this subject (filter), not of the one
# published to: an append conditional on another subject (a binding on its claim's subject).
EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"


class AppendConflict(Exception):
    """Someone else appended to the fenced subject since we last read it."""

    def __init__(self, subject: str, expected: int, actual: int | None = None):
        super().__init__(f"append to {subject} expected last sequence {expected}, actual {actual}")
        self.subject = subject
        self.expected = expected
        self.actual = actual


@dataclass(frozen=True, slots=True)
class Appended:
    seq: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class StoredEvent:
    seq: int
    subject: str
    event: Event
    headers: dict[str, str] = field(default_factory=dict)


def subject_matches(pattern: str | None, subject: str) -> bool:
    """NATS wildcard match: '*' one token, '>' the rest."""
    if pattern is None or pattern == subject:
        return True
    p_tokens, s_tokens = pattern.split("."), subject.split(".")
    for i, tok in enumerate(p_tokens):
        if tok == ">":
            return len(s_tokens) > i
        if i >= len(s_tokens) or (tok != "*" and not fnmatch.fnmatchcase(s_tokens[i], tok)):
            return False
    return len(p_tokens) == len(s_tokens)


class InMemoryEventLog:
    """The same contract as JetStream, in one process: for unit tests and the simulator."""

    def __init__(self) -> None:
        self._entries: list[tuple[str, bytes, dict[str, str]]] = []
        self._msg_ids: dict[str, int] = {}
        self._subject_last: dict[str, int] = {}
        self._grew = asyncio.Condition()

    async def append(self, subject, event, *, msg_id=None, expected_last_subject_seq=None,
                     expected_subject=None, headers=None) -> Appended:
        fenced = expected_subject or subject
        actual = self._last_over(fenced)
        # JetStream checks the expected sequence before it drops a duplicate message id
        if expected_last_subject_seq is not None and actual != expected_last_subject_seq:
            raise AppendConflict(fenced, expected_last_subject_seq, actual)
        if msg_id is not None and msg_id in self._msg_ids:
            return Appended(self._msg_ids[msg_id], duplicate=True)
        self._entries.append((subject, encode_event(event), dict(headers or {})))
        seq = len(self._entries)
        self._subject_last[subject] = seq
        if msg_id is not None:
            self._msg_ids[msg_id] = seq
        async with self._grew:
            self._grew.notify_all()
        return Appended(seq)

    async def last_seq(self) -> int:
        return len(self._entries)

    def _last_over(self, pattern: str) -> int:
        """The last sequence on `pattern` (a wildcard, as nats-server takes one in the check)."""
        if "*" not in pattern and ">" not in pattern:
            return self._subject_last.get(pattern, 0)
        return max((seq for subject, seq in self._subject_last.items() if subject_matches(pattern, subject)),
                   default=0)

    async def last_subject_seq(self, subject: str, direct: bool = False) -> int:
        return self._last_over(subject)

    async def subject_after(self, subject: str, after_seq: int = 0):
        """`subject` may be a wildcard, as a consumer's filter may."""
        for seq in range(after_seq + 1, len(self._entries) + 1):
            if subject_matches(subject, self._entries[seq - 1][0]):
                yield self._stored(seq)

    own_subject_after = subject_after  # JetStream's reads it by a consumer named after the subject

    async def read(self, from_seq=1, until_seq=None, subject=None):
        end = len(self._entries) if until_seq is None else min(until_seq, len(self._entries))
        for seq in range(max(from_seq, 1), end + 1):
            stored = self._stored(seq)
            if subject_matches(subject, stored.subject):
                yield stored

    async def follow(self, from_seq=1, subject=None):
        seq = max(from_seq, 1)
        while True:
            while seq <= len(self._entries):
                stored = self._stored(seq)
                seq += 1
                if subject_matches(subject, stored.subject):
                    yield stored
            async with self._grew:
                await self._grew.wait_for(lambda: seq <= len(self._entries))

    async def follow_raw(self, from_seq=1, subject=None, stop_at=None, headers=True, decoded=False,
                         drop_dead=False, range_end=None):
        """Batches of (seq, subject, payload, headers), like the JetStream log's read path (which
        may leave headers out with `headers=False`, or hand a long range over decoded with
        `decoded=True`, and `drop_dead`, `range_end`; here they cost nothing, and rows are all there is)."""
        seq = max(from_seq, 1)
        while stop_at is None or seq <= stop_at:
            end = len(self._entries) if stop_at is None else min(stop_at, len(self._entries))
            batch = [(i, *self._entries[i - 1]) for i in range(seq, end + 1)
                     if subject_matches(subject, self._entries[i - 1][0])]
            seq = end + 1
            if batch:
                yield [(i, subj, data, dict(h)) for i, subj, data, h in batch]
            if stop_at is not None and seq > stop_at:
                return
            async with self._grew:
                await self._grew.wait_for(lambda: seq <= len(self._entries))

    def _stored(self, seq: int) -> StoredEvent:
        subject, data, headers = self._entries[seq - 1]
        return StoredEvent(seq, subject, decode_event(data), headers)
