"""What every client command shares: the NATS URL option, requests with clear errors, output."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import msgspec
import typer

from shared.telemetry import inject_headers, setup_tracing, tracer

NatsUrl = typer.Option(None, "--nats-url", envvar="GPULEDGER_NATS_URL",
                       help="NATS server URL (default nats://127.0.0.1:4222; env GPULEDGER_NATS_URL)")


def nats_url(value: str | None) -> str:
    return value or os.environ.get("GPULEDGER_NATS_URL") or "nats://127.0.0.1:4222"


def die(message: str, code: int = 1) -> None:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


async def connect_or_die(url: str):
    import nats

    async def quiet(_err) -> None:  # nats-py prints tracebacks by default; we print one clear line
        pass

    try:
        # nats-py keeps retrying an unreachable server whatever the options: bound the attempt
        return await asyncio.wait_for(
            nats.connect(url, connect_timeout=2, max_reconnect_attempts=0, allow_reconnect=False,
                         error_cb=quiet), timeout=5)
    except (Exception, asyncio.TimeoutError) as err:
        why = "no answer within 5s" if isinstance(err, asyncio.TimeoutError) else f"{type(err).__name__}: {err}"
        die(f"cannot reach NATS at {url} ({why}). Is `gpuledger up` running? "
            "Set --nats-url or GPULEDGER_NATS_URL.")


async def request(url: str, subject: str, payload: Any, timeout: float = 10.0, service: str = "") -> Any:
    """Send a command (a dict, bytes or a msgspec Command); return its data, or exit with the
    service's error message."""
    setup_tracing("cli")
    nc = await connect_or_die(url)
    try:
        body = payload if isinstance(payload, bytes) else msgspec.json.encode(payload)
        with tracer().start_as_current_span(f"cli {subject}"):
            try:
                msg = await nc.request(subject, body, timeout=timeout, headers=inject_headers())
            except Exception as err:
                who = f"the {service} service" if service else "the service"
                die(f"no answer on {subject} within {timeout:g}s ({type(err).__name__}). "
                    f"Is {who} running?")
        reply = msgspec.json.decode(msg.data)
    finally:
        await nc.close()
    if not reply.get("ok"):
        error = reply.get("error") or {}
        field = f" (field {error['field']})" if error.get("field") else ""
        die(f"{error.get('code', 'error')}: {error.get('message', reply)}{field}")
    return reply.get("data")


def run(coro):
    return asyncio.run(coro)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=None, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()
