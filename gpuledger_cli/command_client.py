"""Send one command from the CLI and print its reply: clear errors, exit code 1 on failure."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import typer

from gpuledger_cli.client import NatsUrl, die, nats_url, request
from schemas.commands import Command


def nats_url_option() -> Any:
    return NatsUrl


def json_option() -> Any:
    return typer.Option(False, "--json", help="Print the reply as JSON.")


def command_group(name: str, help: str) -> tuple[typer.Typer, Callable[[typer.Typer], None]]:
    """An area's `gpuledger NAME ...` group and the `register(app)` commands_registry calls."""
    group = typer.Typer(help=help, no_args_is_help=True)

    def register(app: typer.Typer) -> None:
        app.add_typer(group, name=name)

    return group, register


def send(url: str | None, subject: str, command: Command, service: str, timeout: float = 15.0) -> Any:
    """The reply's data; a failed reply or an unreachable service ends the CLI with a message."""
    return asyncio.run(request(nats_url(url), subject, command, timeout, service))


def show(data: Any, as_json: bool, render: Callable[[Any], str]) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else render(data))


def read_document(path: Path) -> dict:
    """A YAML or JSON document (JSON is YAML); '-' reads standard input."""
    from gpuledger_cli.documents import load_document

    return load_document(path)


def convert(value: Any, type_: type, what: str) -> Any:
    try:
        return msgspec.convert(value, type_)
    except msgspec.ValidationError as err:
        _die(f"invalid {what}: {err}")


def _die(message: str) -> None:
    die(message)
