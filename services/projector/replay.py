"""Reading the log for projections: raw batches decoded here, and "up to when" as a sequence.

A time is resolved against the stream's own store timestamps (monotonic, set by the server), not
the writers' `at` fields, so "the state at 10:00" means "what the log held at 10:00".
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from datetime import datetime, timezone

from nats.js.errors import NotFoundError

from schemas.events import Event

from ledger.admission import Admission, read_batch

log = logging.getLogger("gpuledger.projector")


async def batches(log_, from_seq: int = 1, stop_at: int | None = None, admission: Admission | None = None,
                  linger_s: float = 0.0) -> AsyncIterator[list[tuple[int, Event | None]]]:
    """Decoded batches of (seq, event) from `from_seq` (forever unless `stop_at`); None where the
    fold skips a message (undecodable, or refused by the writer-authority table). `linger_s`: the
    live tail in bursts (shared.paced)."""
    admission = admission or Admission()
    if stop_at is not None and stop_at < from_seq:
        return
    if hasattr(log_, "follow_raw"):
        paced = {"linger_s": linger_s} if linger_s else {}
        # headers: no fold reads them (ledger.admission), so they are left unread
        async for raw in log_.follow_raw(from_seq, stop_at=stop_at, headers=False, **paced):
            yield read_batch(admission, raw)
        return
    source = log_.read(from_seq, stop_at) if stop_at is not None else log_.follow(from_seq)
    async for stored in source:  # the in-memory log: one event at a time is fine there
        yield [(stored.seq, admission.admit(stored.seq, stored.subject, stored.event))]


def parse_time(value: str) -> float:
    """Unix seconds, or ISO 8601 (a time without a zone is UTC)."""
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):  # "nan", "inf", "1e400": no moment of any log
            raise ValueError(f"time {value!r} is not a finite number of unix seconds")
        return seconds
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"time {value!r} is neither unix seconds nor ISO 8601 "
                         f"(e.g. 2026-01-31T12:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


async def seq_at_time(js, stream: str, last_seq: int, when: float) -> int:
    """The last sequence stored at or before `when` (0 if none): a binary search on store times."""
    low, high = 0, last_seq  # invariant: time(low) <= when (seq 0 is "before everything")
    while low < high:
        mid = (low + high + 1) // 2
        if await _stored_at(js, stream, mid) <= when:
            low = mid
        else:
            high = mid - 1
    return low


async def _stored_at(js, stream: str, seq: int) -> float:
    try:
        msg = await js.get_msg(stream, seq)
    except NotFoundError:
        return float("-inf")  # a gap (never expected: the stream denies deletes)
    return msg.time.timestamp() if msg.time else float("-inf")
