"""The intake's hop stamps for `bench e2e --hops` (shared/hop_stamps.py), only when stamping is on.

For each claim of an intake batch: when nats-server stored its intake message, when the message
reached this process (`StandingPull` notes it), when the intake loop took the batch, and when the
batch's append went out: carried as one header on the append, a value per claim in the order of
the events it holds. The batch being handled is this context's (`CURRENT`), so nothing between
the loop and the append changes its signature for a benchmark's figures.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field

from shared import hop_stamps, jsreply


@dataclass
class IntakeStamps:
    taken: float  # when the intake loop took the batch
    by_seq: dict[int, tuple[int, float]]  # intake sequence -> (stored, unix ns; arrived, unix s)
    seq_of: dict[str, int] = field(default_factory=dict)  # claim id -> its intake sequence

    @classmethod
    def of_batch(cls, msgs) -> IntakeStamps:
        by_seq = {}
        for msg in msgs:
            try:
                by_seq[jsreply.stream_seq(msg)] = (jsreply.stored_ns(msg), getattr(msg, "arrived_at", 0.0))
            except Exception:  # not from JetStream (tests): no stamps for it
                continue
        return cls(time.time(), by_seq)

    def note(self, claim_id: str, seq: int) -> None:
        self.seq_of[claim_id] = seq

    def headers(self, claim_ids: list[str]) -> dict[str, str]:
        """The header for an append of these claims (in the order its events hold them)."""
        stored, arrived = [], []
        for claim_id in claim_ids:
            at_stored, at_arrived = self.by_seq.get(self.seq_of.get(claim_id, 0), (0, 0.0))
            stored.append(at_stored)
            arrived.append(at_arrived)
        return {hop_stamps.HEADER: hop_stamps.encode(
            {"stored": stored, "arrived": arrived, "taken": self.taken, "append": time.time()})}


CURRENT: ContextVar[IntakeStamps | None] = ContextVar("gpuledger_intake_stamps", default=None)
