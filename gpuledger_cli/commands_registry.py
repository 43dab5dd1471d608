"""The table of CLI areas: each module exposes `register(app)`; missing ones are skipped.

Commands load lazily: `gpuledger --help` lists `COMMANDS` (name, module, one help line) without
importing any area, and `gpuledger claim get` imports only `gpuledger_cli.claims`. Importing every
area eagerly pulled in faststream, OpenTelemetry, SQLAlchemy and nats-py: about 2 s of CPU before
anything was printed. An area in `AREAS` that `COMMANDS` does not list still works (it is
imported eagerly, as before); tests/ops_ux/test_cli_lazy.py says what line to add.
"""

from __future__ import annotations

import importlib

import typer
import click  # typer 0.24 builds on click; later ones vendor it and coerce through pydantic (0.3 s a command)
from typer.core import TyperCommand, TyperGroup

AREAS = (
    "gpuledger_cli.up",
    "gpuledger_cli.nats_cmd",
    "gpuledger_cli.claims",
    "gpuledger_cli.events",
    "gpuledger_cli.schemas_cmd",
    "gpuledger_cli.services_cmd",
    "gpuledger_cli.quota",
    "gpuledger_cli.pools",
    "gpuledger_cli.webhook",
    "gpuledger_cli.endpoints",
    "gpuledger_cli.slots",
    "gpuledger_cli.gpus",
    "gpuledger_cli.nodes",
    "gpuledger_cli.projection",
    "gpuledger_cli.bench",
    "gpuledger_cli.simulate",
    "gpuledger_cli.whatif",
    "gpuledger_cli.status",
)

# top-level command -> (its module, the help line `gpuledger --help` shows for it)
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("gpuledger_cli.up", "Run NATS (embedded by default), all five services and, with --demo, "
                               "simulated nodes."),
    "nats": ("gpuledger_cli.nats_cmd", "NATS users and permissions: a server configuration, a user's URL."),
    "claim": ("gpuledger_cli.claims", "Submit and manage GPU claims."),
    "events": ("gpuledger_cli.events", "Read the event log."),
    "schemas": ("gpuledger_cli.schemas_cmd", "The event and command contract as JSON Schema."),
    "service": ("gpuledger_cli.services_cmd", "Run one service in the foreground (reads GPULEDGER_* "
                                              "settings from the environment)."),
    "quota": ("gpuledger_cli.quota", "Namespace GPU quotas and cohort trees: limits, status, alerts, "
                                     "borrowing, reconciliation, drift."),
    "pool": ("gpuledger_cli.pools", "GPU pools (Deckhouse-style): validated, immutable but for access and scheduling."),
    "webhook": ("gpuledger_cli.webhook", "The pod admission webhook on Kubernetes."),
    "gpus": ("gpuledger_cli.gpus", "GPU types, groups, prices and what the fleet has free; pick by "
                                   "--budget or --model-size."),
    "endpoint": ("gpuledger_cli.endpoints", "Serverless endpoints: workers are claims the autoscaler "
                                            "adds and releases."),
    "slot": ("gpuledger_cli.slots", "Model slots (Helix): requests go to a warm slot of the same model, "
                                    "runtime and LoRA adapter with room, else to a new slot."),
    "node": ("gpuledger_cli.nodes", "Node agents: GPU discovery (NVML), the agent process, simulated "
                                    "faults."),
    "projection": ("gpuledger_cli.projection", "The SQL read models: status and rebuilds."),
    "state": ("gpuledger_cli.projection", "The allocator's state at any point of the log."),
    "bench": ("gpuledger_cli.bench", "Benchmarks (figures are wall clock on this machine)."),
    "simulate": ("gpuledger_cli.simulate", "Run the allocator's decision core over a trace with the "
                                           "FGD paper's one-pass protocol."),
    "status": ("gpuledger_cli.status", "Whether each service answers and how far it has read the log; the "
                                       "intake's backlog."),
    "whatif": ("gpuledger_cli.whatif", "Replay the log's claims, releases and hardware facts; at "
                                       "every recorded decision point let the allocator decide with "
                                       "these settings instead; compare with what happened."),
}


def import_area(module_name: str):
    """The area's module, or None when it is not built (yet); any other import error is real."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name == module_name:
            return None
        raise


def commands_of(module_name: str) -> dict[str, click.Command]:
    """The click commands an area's `register(app)` adds, by top-level name."""
    module = import_area(module_name)
    if module is None:
        return {}
    scratch = typer.Typer()
    module.register(scratch)
    commands = dict(typer.main.get_group(scratch).commands)
    for command in commands.values():
        _no_missing_envvar(command)
    return commands


def _no_missing_envvar(command: click.Command) -> None:
    """typer shows every option's env var; click 8.2 then ends a usage error with "(env var:
    'None')" for an option that has none: only options with one say so."""
    for param in command.params:
        if getattr(param, "show_envvar", False) and not param.envvar:
            param.show_envvar = False
    for sub in getattr(command, "commands", {}).values():
        _no_missing_envvar(sub)


class _Listed(TyperCommand):
    """What `--help` shows for a command not loaded yet: its name and help line, nothing else."""

    def __init__(self, name: str, help_line: str):
        super().__init__(name, help=help_line, short_help=help_line, rich_markup_mode=None)


class LazyGroup(TyperGroup):
    """Lists `COMMANDS` from the table; loads an area when one of its commands runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        loaded = super().get_command(ctx, name)
        if loaded is not None or name not in COMMANDS:
            return loaded
        return _Listed(name, COMMANDS[name][1])

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else ""
        if name in COMMANDS and name not in self.commands:
            self.commands.update(commands_of(COMMANDS[name][0]))
        return super().resolve_command(ctx, args)


def register(app: typer.Typer) -> None:
    """Areas the table lists load when used; any other area registers now."""
    listed = {module for module, _help in COMMANDS.values()}
    for name in AREAS:
        if name in listed:
            continue
        module = import_area(name)
        if module is not None:
            module.register(app)
