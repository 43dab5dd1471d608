"""What every client command shares: the NATS URL option, requests with clear errors, output."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
from datetime import datetime
from typing import Any

import msgspec
import typer

from gpuledger_cli.stack_env import read_env

# Imports here are kept light on purpose: `gpuledger --help` and `gpuledger claim get` must answer
# at once, so nats-py, OpenTelemetry and the services load only inside the functions that use them.

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
NatsUrl = typer.Option(None, "--nats-url", envvar="GPULEDGER_NATS_URL",
                       help="NATS server URL (default: env GPULEDGER_NATS_URL, else the URL the last "
                            "`gpuledger up` wrote to .gpuledger/env, else nats://127.0.0.1:4222)")


def redacted(url: str) -> str:
    """The URL with any password masked, for messages (the ops user's URL carries its secret)."""
    return re.sub(r"(://[^:/@,]+):[^@,]*@", r"\1:***@", url)


def nats_url(value: str | None) -> str:
    """The option, the environment, the running `up`'s env file, the NATS default: first found."""
    return (value or os.environ.get("GPULEDGER_NATS_URL") or read_env().get("GPULEDGER_NATS_URL")
            or DEFAULT_NATS_URL)


def inbox_prefix(url: str) -> str:
    """The CLI's reply and consumer-delivery subjects: `_INBOX_<user>` of the URL's user
    (`_INBOX_ops`; without a user in the URL, an nkey ops user or an open server, `_INBOX_ops`
    too), never nats' shared `_INBOX.`, which the `publisher` user may read (any NATS client works
    with it unchanged): an ops CLI answered there showed a publisher every claim list, explain and,
    during `events replay`, the whole log (session 27). The publisher itself keeps `_INBOX`, the
    only inbox it may read. GPULEDGER_NATS_INBOX_PREFIX overrides it."""
    from shared.natscluster import url_inbox_prefix

    try:
        return url_inbox_prefix(url)
    except ValueError as err:
        die(str(err))


def tracing_wanted() -> bool:
    """Whether spans would go anywhere: without an exporter configured the CLI does not even load
    OpenTelemetry (its SDK costs about 0.1 s of CPU to import, a command's whole budget)."""
    if "shared.telemetry" in sys.modules:  # this process traces already (a service, a test): join it
        return True
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "").lower()
    return kind not in ("", "none") or bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


@contextlib.contextmanager
def cli_span(name: str):
    """A span around one CLI request and the trace headers to send with it ({} when not tracing)."""
    if not tracing_wanted():
        yield {}
        return
    from shared.telemetry import inject_headers, setup_tracing, tracer

    setup_tracing("cli")
    with tracer().start_as_current_span(name):
        yield inject_headers()


def die(message: str, code: int = 1) -> None:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


REFUSED: list[str] = []  # the server's permission refusals nats-py handed the error callback


async def connect_or_die(url: str, follow: bool = False):
    """A nats-py connection, or exit naming the problem. `follow` (a command that runs until
    stopped: `events tail`): reconnect for ever and say so on stderr; without it a NATS restart
    closed the connection, and `events tail` waited in silence for good (session 30)."""
    import nats

    from shared.natscluster import connect_args

    async def quiet(err) -> None:  # nats-py prints tracebacks by default; we print one clear line
        if "permissions violation" in str(err).lower():  # a refused call itself only times out
            REFUSED.append(str(err))

    async def back() -> None:  # (not on a disconnect: nats-py calls that on our own close too)
        sys.stderr.write(f"gpuledger: NATS at {redacted(url)} went away; reconnected to it\n")

    reconnecting = (dict(allow_reconnect=True, max_reconnect_attempts=-1, reconnect_time_wait=0.5,
                         reconnected_cb=back) if follow
                    else dict(max_reconnect_attempts=0, allow_reconnect=False))
    try:
        # nats-py keeps retrying an unreachable server whatever the options: bound the attempt
        return await asyncio.wait_for(
            nats.connect(**(connect_args(url) | {"inbox_prefix": inbox_prefix(url)}), connect_timeout=2,
                         error_cb=quiet, **reconnecting), timeout=5)
    except (Exception, asyncio.TimeoutError) as err:
        why = "no answer within 5s" if isinstance(err, asyncio.TimeoutError) else f"{type(err).__name__}: {err}"
        die(f"cannot reach NATS at {redacted(url)} ({why}). Is `gpuledger up` running? "
            "Set --nats-url or GPULEDGER_NATS_URL.")


async def open_log_or_die(url: str, follow: bool = False):
    """(connection, the log) for the commands that read the log, once the stream is known to be
    there: on a NATS server where gpuledger never ran, nats-py's `stream not found` was a
    traceback."""
    from nats.js.errors import NotFoundError

    from shared.jetstream import JetStreamEventLog

    nc = await connect_or_die(url, follow)
    log = JetStreamEventLog(nc)
    try:
        await log.last_seq()
    except NotFoundError:
        await nc.close()
        die(f"NATS at {redacted(url)} has no {log.stream} stream (the log): gpuledger never ran on this "
            "server. Start the stack with `gpuledger up`, or set --nats-url or GPULEDGER_NATS_URL to its NATS.")
    except Exception as err:
        await nc.close()
        refused = REFUSED[-1] if REFUSED else str(err) if "permission" in str(err).lower() else ""
        if refused:
            die(f"NATS refused this user the log ({refused}): use the ops user's URL "
                "(GPULEDGER_NATS_URL, `gpuledger nats creds ops`).")
        die(f"cannot read the log at {redacted(url)} ({type(err).__name__}: {err})")
    return nc, log


async def request(url: str, subject: str, payload: Any, timeout: float = 10.0, service: str = "") -> Any:
    """Send a command (a dict, bytes or a msgspec Command); return its data, or exit with the
    service's error message."""
    conn = await open_requester(url)
    try:
        return await ask(conn, subject, payload, timeout, service)
    finally:
        await conn.close()


async def open_requester(url: str):
    """A connection for requests: the light core-protocol client (`natsreq`) for plain nats://
    URLs, nats-py for anything it does not do (TLS, nkeys). Exits with a clear message when no
    server answers or it refuses the credentials."""
    from gpuledger_cli.natsreq import NatsError, Requester, Unsupported

    try:
        return await Requester.open(url, inbox_prefix(url))
    except Unsupported:
        return _NatsPy(await connect_or_die(url))
    except NatsError as err:
        die(f"NATS at {redacted(url)} refused the connection ({err}). Use the GPULEDGER_NATS_URL line "
            "`gpuledger up` printed, or your deployment's ops user.")
    except (ConnectionError, OSError) as err:
        die(f"cannot reach NATS at {redacted(url)} ({err}). Is `gpuledger up` running? "
            "Set --nats-url or GPULEDGER_NATS_URL.")
    except ValueError as err:  # urllib: a port past 65535, a broken IPv6 host
        die(f"not a NATS URL: {redacted(url)} ({err}). Set --nats-url or GPULEDGER_NATS_URL to "
            "nats://[user:password@]host:port.")


class _NatsPy:
    """nats-py behind the same two calls as `natsreq.Requester`."""

    def __init__(self, nc):
        self.nc = nc

    async def request(self, subject: str, payload: bytes, timeout: float, headers=None) -> bytes:
        return (await self.nc.request(subject, payload, timeout=timeout, headers=headers)).data

    async def close(self) -> None:
        await self.nc.close()


async def ask(conn, subject: str, payload: Any, timeout: float = 10.0, service: str = "",
              whole: bool = False) -> Any:
    """One request on an open connection (`open_requester`): its data (the whole reply when
    `whole`: a listing's `next` too), or exit with the service's error message."""
    body = payload if isinstance(payload, bytes) else msgspec.json.encode(payload)
    with cli_span(f"cli {subject}") as headers:
        try:
            data = await _request_riding_out_a_restart(conn, subject, body, timeout, headers or None)
        except Exception as err:
            if "permission" in str(err).lower():
                die(f"NATS refused this user: {err}. Use the ops user's URL.")
            who = f"the {service} service" if service else "the service"
            why = str(err) or type(err).__name__
            if getattr(err, "no_stream", False):
                die(f"nobody answers on {subject} ({why}), and NATS at this URL has no "
                    f"{_INTAKE} stream: gpuledger has not run here. Is {who} running?")
            die(f"no answer on {subject} within {timeout:g}s ({why}). Is {who} running? `gpuledger status` "
                "says, and whether it is still reading the log after a start")
    reply = msgspec.json.decode(data)
    if not reply.get("ok"):
        error = reply.get("error") or {}
        field = f" (field {error['field']})" if error.get("field") else ""
        die(f"{error.get('code', 'error')}: {error.get('message', reply)}{field}")
    return reply if whole else reply.get("data")


_INTAKE = "GPULEDGER_INTAKE"  # schemas.subjects.INTAKE_STREAM (not imported: keeps `--help` light)
_RETRY_S = 0.25


def _no_responders(err: Exception) -> bool:
    from gpuledger_cli.natsreq import NoResponders

    return isinstance(err, NoResponders) or type(err).__name__ == "NoRespondersError"  # nats-py's


async def _request_riding_out_a_restart(conn, subject: str, body: bytes, timeout: float, headers) -> bytes:
    """The reply; a "no responders" (the request reached no one) is sent again until `timeout`
    when gpuledger runs on this server (its intake stream is there): `up` restarts a service that
    died within a second or two, and a command sent meanwhile used to fail at once. Only "no
    responders" is retried: such a request was delivered to nobody, so nothing is done twice."""
    loop = asyncio.get_running_loop()
    deadline, told = loop.time() + timeout, False
    while True:
        try:
            return await conn.request(subject, body, max(deadline - loop.time(), 0.05), headers)
        except Exception as err:
            if not _no_responders(err) or loop.time() + _RETRY_S >= deadline:
                raise
            if not told:
                if not await _gpuledger_ran_here(conn):
                    err.no_stream = True  # type: ignore[attr-defined]
                    raise
                sys.stderr.write(f"gpuledger: nobody answers on {subject} yet (a service restarting?); "
                                 f"trying again for up to {deadline - loop.time():.0f}s\n")
                told = True
            await asyncio.sleep(_RETRY_S)


async def _gpuledger_ran_here(conn) -> bool:
    """Whether the server has gpuledger's intake stream (every user of the CLI may ask: ops, the
    publisher, a system); a refusal or no answer counts as yes (the retry is bounded anyway)."""
    try:
        reply = msgspec.json.decode(await conn.request(f"$JS.API.STREAM.INFO.{_INTAKE}", b"", 2.0))
    except Exception as err:
        return not _no_responders(err)  # no JetStream at all: not gpuledger's server
    return (reply.get("error") or {}).get("err_code") != 10059  # stream not found


def local_time(epoch: float | None, precision: str = "seconds") -> str:
    """A log time (epoch seconds) as local ISO 8601 with its offset, e.g. 2026-11-03T14:02:11+01:00."""
    if not epoch:
        return ""
    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec=precision)


def run(coro):
    return asyncio.run(coro)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=None, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()
