"""A simulated fleet beats and watches its hardware in one task each, not one per node: the idle
cost of a fleet of 2,000 nodes was 400 awaited heartbeats and 667 timed watch wake-ups a second
(docs/benchmarks.md). Beats still reach the log for every node, refused ones are tried again after
a backoff, and a node is looked at when it is due or woken, and only then."""

import asyncio
from dataclasses import dataclass, field

import nats
import pytest

from schemas import subjects
from schemas.events import NodeHeartbeat
from services.node_agent.app import build_simulated
from services.node_agent.beats import FleetBeats
from services.node_agent.fleet_watch import FleetWatch
from services.node_agent.retry import TRANSIENT
from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.service import start_service, stop_service
from shared.settings import Settings
from tests.waiting import until


async def beats_of(log, node) -> int:
    return len([s async for s in log.read(subject=subjects.node(node)) if isinstance(s.event, NodeHeartbeat)])


async def test_a_simulated_fleet_beats_and_watches_in_one_task_each(fresh_client, fresh_nats):
    settings = Settings(nats_url=fresh_nats.url, heartbeat_s=0.2)
    ctx = await start_service("fleet-pace-test", settings, build_simulated(
        "3xH100x8:islands=2", settings, watch_s=0.2, rescan_s=3600.0))
    try:
        log = JetStreamEventLog(fresh_client)
        nodes = [f"sim-h100-{i}" for i in range(3)]

        async def every_node_beat_twice():
            return all([await beats_of(log, node) >= 2 for node in nodes])

        assert await until(every_node_beat_twice), "every node of the fleet heartbeats"
        names = [task.get_name() for task in ctx.tasks]
        assert not [n for n in names if n.startswith(("heartbeat-", "watch-"))], names
        assert names.count("heartbeats") == 1 and names.count("health-and-usage") == 1, names
    finally:
        await stop_service(ctx)


@dataclass
class _Config:
    watch_s: float = 3.0


@dataclass
class _Agent:
    """What the fleet's beats and watch use of a NodeAgent."""

    node: str
    config: _Config = field(default_factory=_Config)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    changed: set = field(default_factory=set)
    _due: set = field(default_factory=set)
    looked: list = field(default_factory=list)
    fail: int = 0  # passes that fail on NATS trouble first

    def clock(self) -> float:
        return 1.0

    def _looks_due(self) -> set:
        changed, self.changed = self.changed, set()
        return changed

    async def watch_once(self, looks) -> None:
        if self.fail:
            self.fail -= 1
            raise TRANSIENT[0]("nats down")
        self.looked.append(set(looks))


async def test_refused_beats_are_tried_again_after_a_backoff_and_then_stored(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    try:
        agents = [_Agent(f"n{i}") for i in range(5)]
        beats = FleetBeats(agents, nc, lambda: 0.2, monotonic=lambda: 1e9)
        for beat in beats.beats:
            beat.due = 0.0  # every beat due now
        await beats.publisher.start()
        await beats.tick()  # no stream yet: every beat refused (no responders)
        assert await until(lambda: beats.failed == 5), beats.failed
        assert all(b.due > 1e9 and not b.in_flight for b in beats.beats), "each retried after a pause"
        await ensure_streams(nc.jetstream())
        for beat in beats.beats:
            beat.due = 0.0
        await beats.tick()
        assert await until(lambda: beats.stored == 5), beats.stored
        log = JetStreamEventLog(nc)
        assert [await beats_of(log, a.node) for a in agents] == [1] * 5
        await beats.tick()  # an interval after the last beat: nothing due yet
        assert beats.sent == 10
    finally:
        await nc.close()


async def test_a_node_is_looked_at_when_due_or_woken_and_only_with_something_to_look_at():
    now = [0.0]
    quiet, busy, flaky = _Agent("quiet"), _Agent("busy", changed={"usage"}), _Agent("flaky", fail=1)
    flaky.changed = {"health"}
    watch = FleetWatch([quiet, busy, flaky], monotonic=lambda: now[0])
    for slot in watch.slots:
        slot.due = 0.0
    watch.tick()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert quiet.looked == [] and busy.looked == [{"usage"}], "nothing changed: no pass"
    assert flaky.looked == [] and flaky._due == {"health"}, "a failed pass keeps what it owed"
    flaky_slot = watch.slots[2]
    assert flaky_slot.due == pytest.approx(0.1), "tried again after the first backoff step"
    now[0] = 1.0  # not due again before watch_s (3 s), but woken: looked at now
    quiet.changed, quiet.wake = {"usage"}, _set(asyncio.Event())
    watch.tick()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert quiet.looked == [{"usage"}] and not quiet.wake.is_set()
    assert flaky.looked == [{"health"}] and flaky._due == set(), "the owed look, once NATS is back"
    assert busy.looked == [{"usage"}], "not due, not woken: not asked"


def _set(event: asyncio.Event) -> asyncio.Event:
    event.set()
    return event
