"""Time travel: rebuild the read models, or the allocator core's state, from the log up to a point."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine

from ledger.evolve import evolve
from ledger.state import State
from services.projector.db import drop_all, migrate
from services.projector.projector import Projector
from services.projector.replay import batches

Progress = Callable[[int], None]  # called with the last sequence read


@dataclass(frozen=True)
class Rebuilt:
    events: int
    position: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


async def rebuild(event_log, engine: Engine, until_seq: int, batch: int = 5000,
                  progress: Progress | None = None) -> Rebuilt:
    """Drop the read models (alembic downgrade base), recreate them, project events 1..until_seq."""
    started = time.perf_counter()
    drop_all(engine)
    migrate(engine)
    projector = Projector(engine)
    count = 0
    async for chunk in batches(event_log, 1, until_seq):
        for seq, event in chunk:
            projector.stage(seq, event)
            if projector.staged >= batch:
                projector.flush()
        count += len(chunk)
        if progress is not None:
            progress(chunk[-1][0])
    projector.flush()
    return Rebuilt(count, projector.position, time.perf_counter() - started)


async def state_at(event_log, until_seq: int, progress: Progress | None = None) -> State:
    """The allocator core's fold of events 1..until_seq: any past state."""
    state = State()
    async for chunk in batches(event_log, 1, until_seq):
        for seq, event in chunk:
            if event is not None:
                evolve(state, event, seq)
        if progress is not None:
            progress(chunk[-1][0])
    return state
