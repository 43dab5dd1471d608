"""Stale eviction judges a claim's activity by when the allocator heard it (services/allocator/core/
heard.py), not by the writer's time: a node agent an hour behind reporting a busy device does not
make its claim look stale, and one an hour ahead that stopped reporting does not keep it fresh.
Pure: the core with a `Heard`, stamped as the allocator's hooks stamp it."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import DeviceUsage

from services.allocator.core.decide import DecideContext, decide
from services.allocator.core.heard import Heard
from tests.quota.builders import add, claim, fleet, node, of_type, step

HOUR = 3600.0
T = 100_000.0  # the allocator's clock at the allocation
STALE_S = 600.0


def _evicted_after_busy_report(agent_skew_s: float, heard_at: float) -> list[str]:
    """c1 holds the node's one card; its agent reports it busy (on its clock) and the allocator
    hears that at `heard_at`; c2 waits for the card at T + 700."""
    state = fleet(node("n1", 1))
    add(state, claim("c1", at=T))
    heard = Heard(own="me", since=T - 10)
    heard.allocated(of_type(step(state, now=T), ev.ClaimAllocated), T)
    report = ev.UsageObserved(node="n1", at=heard_at + agent_skew_s,
                              devices=[DeviceUsage(uuid="n1-gpu0", pids=[42], utilization_percent=90)])
    add(state, report)
    heard.usage(report, state.units, heard_at)
    add(state, claim("c2", at=T + 690))
    heard.hear(ev.ClaimSubmitted(claim=state.claims["c2"].spec, at=T + 690), T + 690)
    decisions = decide(state, DecideContext(now=T + 700, stale_after_s=STALE_S, node_timeout_s=1e9, heard=heard))
    return [d.claim_id for d in of_type(decisions, ev.ClaimEvicted)]


def test_a_busy_report_from_an_agent_an_hour_behind_keeps_its_claim_fresh():
    assert _evicted_after_busy_report(-HOUR, heard_at=T + 650) == []


def test_an_agent_an_hour_ahead_that_stopped_reporting_does_not_keep_its_claim_fresh():
    assert _evicted_after_busy_report(+HOUR, heard_at=T + 50) == ["c1"]


def test_without_a_heard_the_core_judges_by_the_logs_times_on_one_clock():
    """The simulator, `bench decide` and the core's tests run on one clock: unchanged."""
    state = fleet(node("n1", 1))
    add(state, claim("c1", at=T))
    step(state, now=T)
    add(state, claim("c2", at=T + 690))
    decisions = decide(state, DecideContext(now=T + 700, stale_after_s=STALE_S, node_timeout_s=1e9))
    assert [d.claim_id for d in of_type(decisions, ev.ClaimEvicted)] == ["c1"]
