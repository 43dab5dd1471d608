"""An allocation nothing runs on is released past the grace period judged in its node agent's
times only: idle from the agent's first report after the allocation (or its last report of a
process) to its latest report. Before session 31 idleness counted from the allocation, the
allocator's time: an agent an hour ahead had a new allocation released at its first idle report,
one an hour behind kept an idle allocation an hour past the grace. Pure, through decide and evolve."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import DeviceUsage

from services.allocator.core.decide import DecideContext, decide
from tests.quota.builders import add, claim, fleet, node, of_type, quota, step

GRACE = 300.0
HOUR = 3600.0
ALLOCATED = 100_000.0  # the allocator's clock


def _idle_report(at: float) -> ev.UsageObserved:
    return ev.UsageObserved(node="n1", at=at, devices=[DeviceUsage(uuid="n1-gpu0", pids=[])])


def _held():
    state = fleet(node("n1", 2), quota("team-a", requests_vram="160Gi"))
    add(state, claim("c1", at=ALLOCATED))
    [allocated] = of_type(step(state, now=ALLOCATED), ev.ClaimAllocated)
    assert allocated.grants[0].uuid == "n1-gpu0"
    return state


def _released(state, now: float) -> list[str]:
    decisions = decide(state, DecideContext(now=now, node_timeout_s=1e9, release_unused_after_s=GRACE))
    return [d.claim_id for d in decisions if isinstance(d, ev.AllocationUnused)]


def test_an_agent_an_hour_ahead_does_not_get_a_new_allocation_released_at_its_first_report():
    state = _held()
    add(state, _idle_report(ALLOCATED + HOUR + 5))  # 5 s after the allocation, on a clock an hour ahead
    assert _released(state, now=ALLOCATED + 6) == []
    add(state, _idle_report(ALLOCATED + HOUR + 5 + GRACE + 1))  # idle past the grace, by its clock
    assert _released(state, now=ALLOCATED + GRACE + 7) == ["c1"]


def test_an_agent_an_hour_behind_gets_an_idle_allocation_released_after_the_grace():
    state = _held()
    add(state, _idle_report(ALLOCATED - HOUR + 5), _idle_report(ALLOCATED - HOUR + 5 + GRACE + 1))
    assert _released(state, now=ALLOCATED + GRACE + 7) == ["c1"]
