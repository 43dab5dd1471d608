"""A simulated node whose fake hardware did not change is not looked at again until something
changes it (a command, a workload) or a report is due: a large simulated fleet costs nothing idle."""

from schemas import subjects
from schemas.events import UsageObserved
from shared.eventlog import InMemoryEventLog
from shared.settings import Settings

from services.node_agent.app import simulated_agents
from services.node_agent.fleet import parse_fleet
from services.node_agent.simulation import ProcessCommand, SimulatedFleet


class Counting:
    """Counts the calls a watch pass makes to one NVML function of one fake (by default the
    process query of the usage look)."""

    def __init__(self, fake, name="nvmlDeviceGetComputeRunningProcesses"):
        self.calls, self.real = 0, getattr(fake, name)
        setattr(fake, name, self)

    def __call__(self, *args):
        self.calls += 1
        return self.real(*args)


async def usage_reports(log, node):
    return [s.event async for s in log.read(subject=subjects.node(node)) if isinstance(s.event, UsageObserved)]


async def test_an_unchanged_simulated_node_is_not_watched_until_something_changes_it():
    log = InMemoryEventLog()
    agents, fakes = simulated_agents(parse_fleet("1xH100x8"), Settings(), log, None, watch_s=0.0)
    fleet = SimulatedFleet(agents, fakes)
    (agent,) = agents
    await agent.register()
    counting = Counting(fakes[agent.node])
    await agent._watch_then_wait()
    first = counting.calls
    assert first > 0, "the first pass looks"
    await agent._watch_then_wait()
    await agent._watch_then_wait()
    assert counting.calls == first, "nothing changed: no pass"
    fleet.process(ProcessCommand(node=agent.node, index=2, pid=77))
    await agent._watch_then_wait()
    assert counting.calls > first
    assert any(77 in u.pids for u in (await usage_reports(log, agent.node))[-1].devices)


async def test_a_real_node_is_watched_every_pass():
    log = InMemoryEventLog()
    agents, fakes = simulated_agents(parse_fleet("1xH100x8"), Settings(), log, None, watch_s=0.0)
    (agent,) = agents  # no SimulatedFleet: nothing tells it the hardware is unchanged
    await agent.register()
    counting = Counting(fakes[agent.node])
    await agent._watch_then_wait()
    first = counting.calls
    await agent._watch_then_wait()
    assert counting.calls == 2 * first


async def test_a_workload_that_starts_or_stops_costs_a_usage_look_not_a_health_probe():
    log = InMemoryEventLog()
    agents, fakes = simulated_agents(parse_fleet("1xH100x8"), Settings(), log, None, watch_s=0.0)
    fleet = SimulatedFleet(agents, fakes)
    (agent,) = agents
    await agent.register()
    await agent._watch_then_wait()
    usage, health = Counting(fakes[agent.node]), Counting(fakes[agent.node], "nvmlDeviceGetTotalEccErrors")
    fleet.process(ProcessCommand(node=agent.node, index=1, pid=78))
    await agent._watch_then_wait()
    assert usage.calls > 0 and health.calls == 0
