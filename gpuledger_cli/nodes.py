"""`gpuledger node ...`: discover GPUs, run the node agent, simulate faults and processes."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import msgspec
import typer

from services.node_agent.fleet import DEFAULT_FLEET, FleetSpecError

node_app = typer.Typer(help="Node agents: GPU discovery (NVML), the agent process, simulated faults.",
                       no_args_is_help=True)

NATS_URL = typer.Option(None, "--nats-url", envvar="GPULEDGER_NATS_URL",
                        help="NATS URL (default: env GPULEDGER_NATS_URL, else the URL the last "
                             "`gpuledger up` wrote to .gpuledger/env, else nats://127.0.0.1:4222)")


def register(app: typer.Typer) -> None:
    app.add_typer(node_app, name="node")


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@node_app.command("discover")
def discover_cmd(
    as_json: bool = typer.Option(False, "--json", help="print the NodeRegistered event(s) as JSON"),
    fleet: str = typer.Option("", "--fleet", help=f"discover a simulated fleet, e.g. {DEFAULT_FLEET!r}"),
    node: str = typer.Option("", "--node", help="node name (default GPULEDGER_NODE_NAME or host name)"),
) -> None:
    """Run discovery here and print the NodeRegistered the agent would send (no NATS needed)."""
    from services.node_agent.app import AgentSetupError

    try:
        events, notes = _discover_fleet(fleet) if fleet else _discover_local(node)
    except (FleetSpecError, AgentSetupError) as err:
        _fail(str(err), 2)
    for line in notes:
        typer.echo(f"note: {line}", err=True)
    if as_json:
        payload = [msgspec.to_builtins(e) for e in events]
        typer.echo(json.dumps(payload if fleet else payload[0], indent=2))
        return
    for event in events:
        _print_node(event)


def _discover_local(node: str):
    from services.node_agent.app import local_labels, local_node_name, local_resources, real_nvml
    from services.node_agent.discovery import discover

    nvml = real_nvml()
    try:
        inventory = discover(nvml, node or local_node_name())
    finally:
        nvml.nvmlShutdown()
    cpu, memory = local_resources()
    return [inventory.registered(time.time(), local_labels(), cpu, memory)], inventory.notes.lines()


def _discover_fleet(spec: str):
    from services.node_agent.discovery import discover, nvml_session
    from services.node_agent.fakenvml import FakeNvml
    from services.node_agent.fleet import parse_fleet

    events, notes = [], []
    for node in parse_fleet(spec):
        fake = FakeNvml.from_node_spec(node)
        with nvml_session(fake):
            inventory = discover(fake, node.name)
        events.append(inventory.registered(time.time(), dict(node.labels), node.cpu_milli,
                                           node.memory_mib, simulated=True))
        notes += [f"{node.name}: {line}" for line in inventory.notes.lines()]
    return events, notes


def _print_node(event) -> None:
    typer.echo(f"{event.node}  driver {event.driver_version or '?'}  CUDA {event.cuda_version or '?'}  "
               f"cpu {event.cpu_milli // 1000}  memory {event.memory_mib // 1024} GiB  "
               f"labels {','.join(f'{k}={v}' for k, v in sorted(event.labels.items()))}")
    for d in event.devices:
        where = f"  {d.index}" + (f"/mig{d.mig_index}" if d.mig_index >= 0 else "")
        kind = d.mig_profile or ("MIG mode" if d.mig_enabled else d.product)
        typer.echo(f"{where:<10} {d.uuid:<44} {d.model:<6} {kind:<24} {d.memory_mib:>7} MiB  "
                   f"island {d.island}  {d.pci_bus_id}  {d.health}")


@node_app.command("agent")
def agent_cmd(
    fleet: str = typer.Option("", "--fleet", help="run a simulated fleet instead of real NVML"),
    nats_url: str = NATS_URL,
    node: str = typer.Option("", "--node", help="node name on real NVML (default: host name)"),
    no_workloads: bool = typer.Option(False, "--no-workloads",
                                      help="simulated fleet: no fake process per bound claim"),
) -> None:
    """Run the node agent: real NVML by default, `--fleet SPEC` for a simulated fleet."""
    from gpuledger_cli.client import nats_url as resolve_url, redacted
    from services.node_agent.app import main

    argv = (["--fleet", fleet] if fleet else []) + ["--nats-url", resolve_url(nats_url)]
    argv += (["--node", node] if node else []) + (["--no-workloads"] if no_workloads else [])
    raise typer.Exit(main(argv))


@node_app.command("fault")
def fault_cmd(
    node: str = typer.Argument(..., help="simulated node, e.g. sim-h100-0"),
    index: int = typer.Argument(..., min=0, help="GPU index on that node"),
    healthy: bool = typer.Option(False, "--healthy", help="heal the GPU instead"),
    kind: str = typer.Option("ecc", "--kind", help="ecc | lost | row-remap | xid"),
    xid: int = typer.Option(79, "--xid", min=0, help="the XID number for --kind xid"),
    nats_url: str = NATS_URL,
) -> None:
    """Fault (or heal) a GPU of a simulated fleet; its agent reports DeviceHealthChanged."""
    from services.node_agent.simulation import FAULT_SUBJECT

    body = {"node": node, "index": index, "health": "Healthy" if healthy else "Faulted",
            "kind": kind, "xid": xid}
    _request(FAULT_SUBJECT, body, nats_url)


@node_app.command("process")
def process_cmd(
    node: str = typer.Argument(..., help="simulated node"),
    index: int = typer.Argument(..., min=0, help="GPU index"),
    pid: int = typer.Argument(..., min=1, help="the fake process id"),
    mig_index: int = typer.Option(-1, "--mig-index", min=-1, help="MIG instance on that GPU"),
    used_mib: int = typer.Option(1024, "--used-mib", min=0, help="GPU memory the process uses, MiB"),
    utilization: int = typer.Option(50, "--utilization", min=0, max=100, help="GPU utilization it causes, percent"),
    stop: bool = typer.Option(False, "--stop", help="end the process instead"),
    nats_url: str = NATS_URL,
) -> None:
    """Start (or stop) a fake process on a simulated GPU: for drift and usage checks."""
    from services.node_agent.simulation import PROCESS_SUBJECT

    body = {"node": node, "index": index, "pid": pid, "mig_index": mig_index, "used_mib": used_mib,
            "utilization_percent": utilization, "action": "stop" if stop else "start"}
    _request(PROCESS_SUBJECT, body, nats_url)


def _request(subject: str, body: dict, nats_url: str | None) -> None:
    from gpuledger_cli.client import nats_url as resolve_url, redacted

    url = resolve_url(nats_url)  # the option, the variable, or the running `up`'s env file
    try:
        answer = asyncio.run(_ask(url, subject, body))
    except Exception as err:  # no server, no responder: say which
        _fail(f"{subject} via {redacted(url)}: {type(err).__name__}: {err or 'no simulated fleet answered'}")
    if not answer.get("ok"):
        _fail(answer.get("error", "refused"))
    typer.echo(json.dumps(answer))


async def _ask(url: str, subject: str, body: dict) -> dict:
    from gpuledger_cli.client import connect_or_die

    nc = await connect_or_die(url)
    try:
        reply = await nc.request(subject, json.dumps(body).encode(), timeout=5)
        return json.loads(reply.data)
    finally:
        await nc.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(node_app())
