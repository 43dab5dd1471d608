"""The CLI answers at once: `gpuledger --help` imports no area, `claim get` no faststream,
OpenTelemetry or SQLAlchemy; the lazy table agrees with what the areas register; every option
and argument of every command says what it is for. (CPU time itself is measured, not asserted:
`python -m bench.cli_cpu`.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuledger_cli import commands_registry as registry

HEAVY = ("faststream", "opentelemetry", "sqlalchemy", "alembic", "nats", "prometheus_client", "services",
         "shared.service", "matplotlib", "rich")


PROBE = """
import json, sys
sys.argv = ["gpuledger", *json.loads(sys.argv[1])]
from gpuledger_cli.main import app
try:
    app()
except SystemExit:
    pass
sys.__stdout__.write("\\n" + json.dumps(sorted(sys.modules)))
"""


def imported_by(*args: str) -> set[str]:
    """Every module a CLI invocation imported (run in a fresh interpreter)."""
    import json

    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True,
                          timeout=60)
    names = set(json.loads(done.stdout.strip().splitlines()[-1]))
    return names | {name.split(".")[0] for name in names}


def test_help_imports_no_area_and_no_heavy_library():
    loaded = imported_by("--help")
    assert not {h for h in HEAVY if h in loaded}
    assert not {m for m in registry.AREAS if m in loaded}


def test_claim_get_loads_only_what_a_request_needs():
    """Not even nats-py: a request goes through the light core-protocol client (natsreq)."""
    loaded = imported_by("claim", "get", "x", "--nats-url", "nats://127.0.0.1:9")  # refused at once
    assert "gpuledger_cli.claims" in loaded and "gpuledger_cli.natsreq" in loaded
    assert not {h for h in ("faststream", "opentelemetry", "sqlalchemy", "services", "rich", "nats",
                            "prometheus_client") if h in loaded}


def test_the_lazy_table_lists_what_each_area_registers_with_its_help_line():
    for module in dict.fromkeys(registry.AREAS):
        real = registry.commands_of(module)
        listed = {name for name, (mod, _help) in registry.COMMANDS.items() if mod == module}
        assert set(real) == listed, (
            f"{module} registers {sorted(real)}; add to COMMANDS in gpuledger_cli/commands_registry.py: "
            + ", ".join(f'"{n}": ("{module}", "{_short(real[n])}")' for n in sorted(set(real) - listed)))
        for name, command in real.items():
            assert registry.COMMANDS[name][1] == _short(command), f"help line of {name!r} differs"


def _short(command) -> str:
    return command.get_short_help_str(limit=1000)


def all_commands():
    for module in dict.fromkeys(registry.AREAS):
        for name, command in registry.commands_of(module).items():
            yield from _walk(name, command)


def _walk(path: str, command):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _walk(f"{path} {name}", sub)


@pytest.mark.parametrize("path,command", list(all_commands()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_option_and_argument_says_what_it_is_for(path, command):
    bare = [p.name for p in command.params if not (getattr(p, "help", None) or "").strip()]
    assert not bare, f"gpuledger {path}: no help text for {bare}"
