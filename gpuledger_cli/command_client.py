"""Send one command from the CLI and print its reply: clear errors, exit code 1 on failure."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import nats
import typer
from nats.errors import NoRespondersError, NoServersError, TimeoutError as NatsTimeout

from schemas.commands import Command
from shared import rpc

DEFAULT_NATS_URL = os.environ.get("GPULEDGER_NATS_URL", "nats://127.0.0.1:4222")


def nats_url_option() -> Any:
    return typer.Option(DEFAULT_NATS_URL, "--nats-url", envvar="GPULEDGER_NATS_URL",
                        help="NATS server of the gpuledger stack.")


async def _request(url: str, subject: str, command: Command, timeout: float):
    from gpuledger_cli.client import connect_or_die  # one bounded, quiet connect for every command

    nc = await connect_or_die(url)
    try:
        return await rpc.call(nc, subject, command, timeout)
    finally:
        await nc.close()


def send(url: str, subject: str, command: Command, service: str, timeout: float = 15.0) -> Any:
    """The reply's data; a failed reply or an unreachable service ends the CLI with a message."""
    try:
        reply = asyncio.run(_request(url, subject, command, timeout))
    except (NoServersError, OSError) as err:
        _die(f"cannot reach NATS at {url}: {err or type(err).__name__}")
    except NoRespondersError:
        _die(f"no {service} answers on {subject}: is the {service} service running?")
    except NatsTimeout:
        _die(f"{service} did not answer on {subject} within {timeout:.0f}s")
    if not reply.ok:
        error = reply.error
        where = f" ({error.field})" if error and error.field else ""
        _die(f"{error.code if error else 'error'}{where}: {error.message if error else reply}")
    return reply.data


def show(data: Any, as_json: bool, render: Callable[[Any], str]) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else render(data))


def read_document(path: Path) -> dict:
    """A JSON file (or YAML, when PyYAML is installed); '-' reads standard input."""
    text = typer.get_text_stream("stdin").read() if str(path) == "-" else _read(path)
    if str(path).endswith((".yaml", ".yml")):
        try:
            import yaml  # optional: not a dependency of gpuledger
        except ModuleNotFoundError:
            _die(f"{path}: reading YAML needs PyYAML (pip install pyyaml); or give a JSON file")
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as err:
            _die(f"{path}: not valid YAML: {err}")
    try:
        return json.loads(text)
    except ValueError as err:
        _die(f"{path}: not valid JSON: {err}")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        _die(f"cannot read {path}: {err.strerror}")


def convert(value: Any, type_: type, what: str) -> Any:
    try:
        return msgspec.convert(value, type_)
    except msgspec.ValidationError as err:
        _die(f"invalid {what}: {err}")


def _die(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)
