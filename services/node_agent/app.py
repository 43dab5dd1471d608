"""Wiring: the node-agent service process, on real NVML or on a simulated fleet.

    python -m services.node_agent [--fleet SPEC] [--nats-url URL] [--node NAME]
    build_real(settings)            -> a builder for shared.service.serve (this machine's GPUs)
    build_simulated(fleet_spec)     -> a builder that runs every node of a simulated fleet
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import socket
import sys
from typing import Any

from ledger.follower import Refreezer, old_generation_off
from ledger import node_claims
from ledger.inventory import labels_problem as inventory_labels
from shared.nats_auth import DEMO_AGENTS, node_inbox, user_inbox
from shared.natscluster import INBOX_PREFIX_ENV
from shared.service import Builder, ServiceContext, leaving_nothing_behind, serve
from shared.settings import Settings
from services.node_agent.agent import AgentConfig, NodeAgent
from services.node_agent.beats import FleetBeats
from services.node_agent.fleet_watch import FleetWatch
from services.node_agent.fakenvml import FakeNvml
from services.node_agent.fleet import DEFAULT_FLEET, FleetSpecError, SimNodeSpec, parse_fleet
from services.node_agent.health import APPLICATION_XIDS
from services.node_agent.nvmlcalls import error_text
from services.node_agent.simulation import SimulatedFleet
from services.node_agent.watch import another_agent_watching, watch_records

SERVICE = "node-agent"
ENDED_POLICIES = ("report", "kill")
log = logging.getLogger("gpuledger.node_agent")


class AgentSetupError(RuntimeError):
    """The agent cannot start (no NVML, bad configuration); the message says what to do."""


# --- configuration --------------------------------------------------------------------------


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        raise AgentSetupError(f"{name} must be a number, got {raw!r}") from None


def xid_ignore_from_env() -> frozenset[int]:
    raw = os.environ.get("GPULEDGER_XID_IGNORE", "")
    if not raw:
        return APPLICATION_XIDS
    try:
        return frozenset(int(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise AgentSetupError(f"GPULEDGER_XID_IGNORE must be comma-separated XID numbers, got {raw!r}") from None


def agent_config(node: str, settings: Settings, **fields: Any) -> AgentConfig:
    """Intervals from the environment; `fields` (labels, cpu, ...) describe the node."""
    return AgentConfig(
        node=node, heartbeat_s=settings.heartbeat_s,
        watch_s=_env_float("GPULEDGER_AGENT_WATCH_S", 3.0),
        usage_every_s=_env_float("GPULEDGER_AGENT_USAGE_EVERY_S", 60.0),
        rescan_s=_env_float("GPULEDGER_AGENT_RESCAN_S", 60.0),
        xid_hold_s=_env_float("GPULEDGER_XID_HOLD_S", 300.0),
        xid_ignore=xid_ignore_from_env(),
        fault_drains_node=os.environ.get("GPULEDGER_FAULT_DRAINS_NODE", "1") not in ("0", "false", "no"),
        kill_unallocated_after_s=settings.kill_unallocated_after_s,
        **fields)


def ended_policy() -> str:
    """GPULEDGER_ENDED_WORKLOADS: what a real agent does with processes left on the devices of a
    claim that ended: `report` them (the default) or `kill` them (SIGTERM)."""
    policy = os.environ.get("GPULEDGER_ENDED_WORKLOADS", "report").strip().lower()
    if policy not in ENDED_POLICIES:
        raise AgentSetupError(f"GPULEDGER_ENDED_WORKLOADS must be one of {', '.join(ENDED_POLICIES)}, "
                              f"got {policy!r}")
    return policy


def local_node_name() -> str:
    """GPULEDGER_NODE_NAME, else the host name made a valid node name."""
    raw = os.environ.get("GPULEDGER_NODE_NAME") or socket.gethostname().split(".")[0]
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:63]
    if not name:
        raise AgentSetupError(f"cannot make a node name from {raw!r}; set GPULEDGER_NODE_NAME")
    return name


def local_labels() -> dict[str, str]:
    """GPULEDGER_NODE_LABELS='zone=a,rack=r7' (gpu-model, gpu-count and mig are added from NVML)."""
    labels = {}
    for item in filter(None, (p.strip() for p in os.environ.get("GPULEDGER_NODE_LABELS", "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise AgentSetupError(f"GPULEDGER_NODE_LABELS: {item!r} is not key=value")
        labels[key.strip()] = value.strip()
    # the fold would drop the whole inventory (ledger/inventory.py), or ignore a bad cap (node_claims.py)
    problem = inventory_labels(labels) or node_claims.label_problem(labels)
    if problem:
        raise AgentSetupError(f"GPULEDGER_NODE_LABELS: {problem}")
    return labels


def local_resources() -> tuple[int, int]:
    """(cpu_milli, memory_mib) of this machine."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        memory = 0
    return cpus * 1000, int(memory)


def real_nvml() -> Any:
    """The real pynvml module, initialised; a clear error when the driver is missing."""
    try:
        import pynvml
    except ImportError as err:
        raise AgentSetupError("pynvml is missing: pip install nvidia-ml-py") from err
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise AgentSetupError(f"NVML is not available ({error_text(err)}): is the NVIDIA driver "
                              "installed and libnvidia-ml.so on the library path? For a simulated "
                              "fleet use --fleet SPEC") from None
    return pynvml


# --- builders ---------------------------------------------------------------------------------


REGISTERING = 32  # registrations in flight at once: a fleet of thousands starts in seconds


async def _start_agents(ctx: ServiceContext, agents: list[NodeAgent], fleet: bool = False) -> None:
    """Register every node, start its loops, then watch the records of all of them at once. A
    simulated `fleet` beats and watches its hardware together (services/node_agent/beats.py,
    fleet_watch.py), a real node in loops of its own."""
    gate = asyncio.Semaphore(REGISTERING)
    looks = FleetWatch(agents) if fleet else None

    async def start(agent: NodeAgent) -> None:
        async with gate:
            await agent.register()
        ctx.spawn(agent.binder.run(), f"bind-{agent.node}")
        if looks is None:
            ctx.spawn(agent.heartbeat_loop(), f"heartbeat-{agent.node}")
            ctx.spawn(agent.watch_loop(), f"watch-{agent.node}")
        else:
            looks.first_look(agent)

    await asyncio.gather(*(start(agent) for agent in agents))
    if looks is not None:
        ctx.spawn(FleetBeats(agents, ctx.nc, lambda: agents[0].config.heartbeat_s).run(), "heartbeats")
        ctx.spawn(looks.run(), "health-and-usage")
    watch = watch_records(ctx.nc, [agent.binder for agent in agents])
    await watch.start()  # the records are watched before the process says it is ready
    ctx.spawn(watch.run(), "node-records")


def build_real(settings: Settings | None = None, node: str | None = None) -> Builder:
    """A builder for this machine's GPUs through the real NVML."""
    settings = settings or Settings()
    name = node or local_node_name()
    cpu, memory = local_resources()
    config = agent_config(name, settings, labels=local_labels(), cpu_milli=cpu, memory_mib=memory)
    kill = ended_policy() == "kill"
    nvml = real_nvml()  # now, so a machine without a driver fails before connecting anywhere

    async def build(ctx: ServiceContext) -> None:
        if await another_agent_watching(ctx.nc, name):
            # two agents for one node bind every claim twice and take each other's watch of the
            # node's record in turn (docs/reliability.md, Replicas): the second does not start
            raise AgentSetupError(f"another node agent is running for node {name!r} (it watches the node's "
                                  "record of live claims): stop it first, or give this one another "
                                  "node name (GPULEDGER_NODE_NAME)")
        agent = NodeAgent(nvml, config, ctx.log, ctx.nc, offload=True)
        agent.on_ended.append(lambda claim: agent.look_for_leftovers(claim, kill))
        await _start_agents(ctx, [agent])
        ctx.metrics.gauges("gpuledger_agent_nodes", "Nodes this agent process reports for", (),
                           lambda: {(): 1})
        ctx.on_stop.append(lambda: asyncio.to_thread(nvml.nvmlShutdown))
    return build


def simulated_agents(nodes: list[SimNodeSpec], settings: Settings, event_log: Any, nc: Any,
                     **config: Any) -> tuple[list[NodeAgent], dict[str, FakeNvml]]:
    fakes = {spec.name: FakeNvml.from_node_spec(spec) for spec in nodes}
    agents = []
    for spec in nodes:
        fakes[spec.name].nvmlInit()
        cfg = agent_config(spec.name, settings, labels=dict(spec.labels), cpu_milli=spec.cpu_milli,
                           memory_mib=spec.memory_mib, simulated=True)
        for key, value in config.items():
            setattr(cfg, key, value)
        agents.append(NodeAgent(fakes[spec.name], cfg, event_log, nc))
    return agents, fakes


def build_simulated(fleet_spec: str = DEFAULT_FLEET, settings: Settings | None = None,
                    workloads: bool = True, **config: Any) -> Builder:
    """A builder running every node of `fleet_spec` in this process. The spec is checked now, so
    a bad one fails before anything connects (FleetSpecError). `config` overrides AgentConfig
    fields (e.g. watch_s=0.2 in tests)."""
    nodes = parse_fleet(fleet_spec)
    settings = settings or Settings()

    async def build(ctx: ServiceContext) -> None:
        agents, fakes = simulated_agents(nodes, settings, ctx.log, ctx.nc, **config)
        ctx.metrics.gauges("gpuledger_agent_nodes", "Nodes this agent process reports for", (),
                           lambda: {(): len(agents)})
        fleet = SimulatedFleet(agents, fakes)
        ctx.sim_fleet = fleet  # for tests and the demo: faults and processes in-process
        subscriptions = await fleet.subscribe(ctx.nc)
        ctx.on_stop.append(lambda: asyncio.gather(*(sub.unsubscribe() for sub in subscriptions),
                                                  return_exceptions=True))
        if workloads:
            _wire_workloads(fleet, agents)
        await _start_agents(ctx, agents, fleet=True)
        ctx.spawn(refreeze_forever(), "fleet-refreeze")
    return build


FLEET_REFREEZE_S = 10.0  # a full collection of everything every 60 of these (10 minutes)


async def refreeze_forever(every_s: float = FLEET_REFREEZE_S) -> None:
    """A simulated fleet holds many long-lived objects (each node's fake devices, processes,
    records): the collector's automatic full passes rescanned them all, about 45 ms each (13 % of
    the process's CPU in `bench e2e` at 100 nodes). Every while, what was made since the last
    time is collected and the rest frozen out of its reach (ledger.follower.Refreezer). As in the
    followers, the young generations only (`old_generation_off`): a full pass over everything
    made in the last 10 s was still 6 % of the fleet's CPU in `bench e2e` at 1,000 claims/s, and
    grows with the fleet; an object that survived two collections is the fleet's own state,
    and cyclic garbage among it waits for the full collection every `unfreeze_every` refreezes."""
    refreezer = Refreezer(every=1, unfreeze_every=60, young_only=True)
    with old_generation_off():
        while True:
            await asyncio.sleep(every_s)
            refreezer.add()


def _wire_workloads(fleet: SimulatedFleet, agents: list[NodeAgent]) -> None:
    """A bound claim runs fake processes on its devices until its node's record drops it."""
    for agent in agents:
        agent.on_bound.append(lambda claim, node=agent.node: fleet.start_workload(node, claim))
        agent.on_ended.append(lambda claim: fleet.end_workload(claim.claim_id))


# --- entry point --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m services.node_agent",
                                     description="gpuledger node agent (real NVML, or --fleet)")
    parser.add_argument("--fleet", default="", help=f"simulate a fleet, e.g. {DEFAULT_FLEET!r}")
    parser.add_argument("--nats-url", default="", help="NATS URL (default GPULEDGER_NATS_URL)")
    parser.add_argument("--node", default="", help="node name on real NVML (default: host name)")
    parser.add_argument("--no-workloads", action="store_true",
                        help="simulated fleet: no fake process per bound claim")
    return parser.parse_args(argv)


def builder_for(args: argparse.Namespace, settings: Settings) -> Builder:
    if args.fleet:
        return build_simulated(args.fleet, settings, workloads=not args.no_workloads)
    return build_real(settings, args.node or None)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=os.environ.get("GPULEDGER_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = Settings(nats_url=args.nats_url) if args.nats_url else Settings()
    try:
        build = builder_for(args, settings)
        # its own inbox prefix, as its NATS user allows: one node's agent, or the simulated fleet's
        inbox = user_inbox(DEMO_AGENTS) if args.fleet else node_inbox(args.node or local_node_name())
        os.environ.setdefault(INBOX_PREFIX_ENV, inbox)
        _run_loop()(leaving_nothing_behind(serve(SERVICE, settings, build)))
    except (FleetSpecError, AgentSetupError) as err:
        print(f"node-agent: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


def _run_loop():
    """uvloop where it is installed, as for the other services (services_cmd.run_service): a
    simulated fleet's process is all awaited appends and requests, where uvloop costs less."""
    try:
        from uvloop import run
    except ImportError:
        return asyncio.run
    return run
