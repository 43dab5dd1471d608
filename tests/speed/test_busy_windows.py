"""Under load the projector gathers more before it commits: every BUSY_COMMIT_EVERY_S once claim
rows come at BUSY_ROWS_PER_S; quieter, it keeps its short window (the read models lag by about as
much as before). The rule is checked on the rows a real batch of events makes."""

from __future__ import annotations

from schemas import events as ev
from services.projector import runner
from services.projector.projector import Projector, _end_times
from tests.quota.builders import claim, node


def _projected_window(claims: int, span_s: float) -> float:
    projector = Projector(engine=None)
    events = [node("n1", 8), ev.EventBatch(events=[claim(f"w-{i}", at=2.0) for i in range(claims)], at=2.0)]
    for seq, event in enumerate(events, 1):
        projector.stage(seq, event)
    return runner.commit_window_s(projector.take(), span_s)


def test_the_projector_widens_its_window_when_a_window_was_busy():
    rows = 120  # claims submitted in the window: a row each
    busy_span = rows / runner.BUSY_ROWS_PER_S  # the window lasted this long or less: busy
    assert _projected_window(rows, busy_span) == runner.BUSY_COMMIT_EVERY_S > runner.COMMIT_EVERY_S
    # the same rows over a longer time, or few rows: the short window (read models lag as before)
    assert _projected_window(rows, busy_span * 1.5) == runner.COMMIT_EVERY_S
    assert _projected_window(3, runner.COMMIT_EVERY_S) == runner.COMMIT_EVERY_S


def test_the_projector_widens_its_window_again_at_saturation_rates():
    rows = 300
    flood_span = rows / runner.FLOOD_ROWS_PER_S  # claim rows at the flood rate: the longest window
    assert _projected_window(rows, flood_span) == runner.FLOOD_COMMIT_EVERY_S > runner.BUSY_COMMIT_EVERY_S
    # busy but below the flood rate: the busy window, as before
    assert _projected_window(rows, flood_span * 1.5) == runner.BUSY_COMMIT_EVERY_S


def test_a_batch_ends_each_claim_at_its_own_members_time():
    """Each claim a batch ends gets the time of the first member naming it (one pass per batch)."""
    batch = ev.EventBatch(events=[ev.ClaimReleased(claim_id=f"e-{i}", at=10.0 + i) for i in range(300)]
                          + [ev.ClaimReleased(claim_id="e-0", at=99.0)], at=5.0)
    times = _end_times(batch)
    assert times["e-0"] == 10.0 and times["e-299"] == 309.0 and len(times) == 300
    assert _end_times(ev.ClaimReleased(claim_id="x", at=3.0)) == {}  # not a batch: the event's own time
    projector = Projector(engine=None)
    for seq, event in enumerate([node("n1", 8), claim("e-7", at=2.0), batch], 1):
        projector.stage(seq, event)
    assert projector.ended_at["e-7"] == 17.0
