"""`gpuledger status`: is the stack up? Each service is asked one cheap query (does it answer, and
how far it has read the log), and the intake is looked at: claims waiting to be handled, and
messages on intake subjects no consumer takes (they stay for good; docs/contract.md). A log that
has stored nothing for twice the node timeout while the claim service counts nodes ready is a
stack that cannot write (nats-server's disk full: docs/reliability.md): ready nodes heartbeat, and
silent ones are declared lost, both appended."""

from __future__ import annotations

import os
import re
import time
from datetime import datetime
from typing import Any, Optional

import msgspec
import typer

from gpuledger_cli.client import NatsUrl, die, nats_url, open_requester, print_json, redacted, run

INTAKE_STREAM = "GPULEDGER_INTAKE"
LOG_STREAM = "GPULEDGER"
INTAKE_CONSUMERS = ("claim-intake", "claim-intake-systems")  # services/claim/intake.py
# each service and the query that shows it is there (the projector answers none: `projection status`)
PROBES = (("claim", "gpu.qry.cluster.summary", {}), ("allocator", "gpu.qry.allocator.status", {}),
          ("quota", "gpu.cmd.quota.list", {}), ("pool-controller", "gpu.qry.pool.list", {}))


async def _ask(conn, subject: str, payload: Any, timeout: float) -> tuple[Any, str]:
    """(the reply's data or the JetStream API's answer, "") or (None, why not)."""
    try:
        reply = msgspec.json.decode(await conn.request(subject, msgspec.json.encode(payload), timeout))
    except Exception as err:
        return None, str(err) or type(err).__name__
    if subject.startswith("$JS.API."):
        error = reply.get("error")
        return (None, error.get("description", str(error))) if error else (reply, "")
    if not reply.get("ok"):
        return None, str((reply.get("error") or {}).get("message", reply))
    return reply.get("data"), ""


async def gather_status(url: str, timeout: float) -> dict:
    conn = await open_requester(url)
    try:
        log, why = await _ask(conn, f"$JS.API.STREAM.INFO.{LOG_STREAM}", {}, timeout)
        state = (log or {}).get("state", {})
        report: dict[str, Any] = {"nats": redacted(url), "log_last_seq": state.get("last_seq")}
        if log is None:
            report["log_error"] = why
        last_stored = _unix_time(state.get("last_ts", ""))
        if last_stored is not None and state.get("last_seq"):
            # on one clock: the server's time of the answer (`ts`) against its time of the last
            # append, not this host's clock (one off by a minute called a busy log stalled)
            server_now = _unix_time((log or {}).get("ts", ""))
            now = server_now if server_now is not None else time.time()
            report["log_idle_s"] = round(max(0.0, now - last_stored), 1)
        services = {}
        for name, subject, payload in PROBES:
            data, why = await _ask(conn, subject, payload, timeout)
            services[name] = (_service(name, data) if data is not None
                              else {"up": None, "refused": why} if _refused(why) else {"up": False, "error": why})
        report["services"] = services
        report["intake"] = await _intake(conn, timeout)
        report["log_stalled"] = _stalled(report)
        return report
    finally:
        await conn.close()


def _unix_time(stamp: str) -> float | None:
    """JetStream's RFC 3339 time (nanoseconds, `Z`) as unix seconds; None when there is none."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", stamp or "")
    if not match or match.group(1).startswith("0001"):  # Go's zero time: an empty stream
        return None
    fraction = (match.group(2) or ".0")[:7]
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    return datetime.fromisoformat(match.group(1) + fraction + zone).timestamp()


def _stalled(report: dict) -> dict | None:
    """The log idle past twice the node timeout while the claim service counts nodes ready."""
    claim, idle = report["services"].get("claim") or {}, report.get("log_idle_s")
    try:
        limit = 2 * max(float(os.environ.get("GPULEDGER_NODE_TIMEOUT_S", "30")), 0.0)
    except ValueError:
        limit = 60.0
    if claim.get("up") and (claim.get("nodes_ready") or 0) > 0 and idle is not None and idle > limit:
        return {"idle_s": idle, "nodes_ready": claim["nodes_ready"], "limit_s": limit}
    return None


def _refused(why: str) -> bool:
    """The server refused this user the question (the publisher's URL given to the CLI): the
    service may well be up."""
    return "permissions violation" in why.lower()


def _service(name: str, data: Any) -> dict:
    if name == "claim":
        return {"up": True, "last_seq": data.get("last_seq"), "caught_up": data.get("caught_up", True),
                "nodes": data.get("nodes"),
                "nodes_ready": data.get("nodes_ready"), "claims": data.get("claims", {}),
                "pending": data.get("pending")}
    if name == "allocator":
        return {"up": True, "last_seq": data.get("last_seq"), "pending": data.get("pending"),
                "claims": data.get("claims"), "node_records_too_big": data.get("node_records_too_big", 0),
                "node_records_too_big_nodes": data.get("node_records_too_big_nodes", [])}
    return {"up": True, "items": len(data) if isinstance(data, list) else None}


async def _intake(conn, timeout: float) -> dict:
    stream, why = await _ask(conn, f"$JS.API.STREAM.INFO.{INTAKE_STREAM}", {}, timeout)
    if stream is None:
        return {"error": why}
    stored = stream.get("state", {}).get("messages", 0)
    full = _full(stream)
    waiting = {}
    for durable in INTAKE_CONSUMERS:
        info, why = await _ask(conn, f"$JS.API.CONSUMER.INFO.{INTAKE_STREAM}.{durable}", {}, timeout)
        waiting[durable] = (info.get("num_pending", 0) + info.get("num_ack_pending", 0)) if info else None
    taken = sum(n for n in waiting.values() if n is not None)
    return {"stored": stored, "waiting": waiting,
            "untaken": max(0, stored - taken) if None not in waiting.values() else None} | (
        {"full": full} if full else {})


def _full(stream: dict) -> str:
    """Which of the intake's limits it has reached ("" when none): nats-server then refuses every
    publish to it (503 `maximum messages exceeded`), until the claim service has drained it."""
    config, state = stream.get("config", {}), stream.get("state", {})
    for limit, used, what in (("max_msgs", "messages", "messages"), ("max_bytes", "bytes", "bytes")):
        cap = config.get(limit, -1) or -1
        if cap > 0 and state.get(used, 0) >= cap:
            return f"{state.get(used, 0)} of {cap} {what}"
    return ""


def _print(report: dict) -> None:
    last = report.get("log_last_seq")
    typer.echo(f"NATS {report['nats']}: the log at seq {last}" if last is not None
               else f"NATS {report['nats']}: the log unreadable ({report.get('log_error')})")
    for name, s in report["services"].items():
        if s["up"] is None:
            typer.secho(f"  {name:16} not asked: this user is refused ({s['refused']})", fg=typer.colors.YELLOW)
            continue
        if not s["up"]:
            typer.secho(f"  {name:16} DOWN  no answer ({s['error']})", fg=typer.colors.RED)
            continue
        line = f"  {name:16} up"
        if s.get("last_seq") is not None and last is not None:
            line += f"  read to seq {s['last_seq']} ({max(0, last - s['last_seq'])} behind)"
        if name == "claim" and not s.get("caught_up", True):
            line += "  CATCHING UP: reading the log from the start; claims wait in the intake until it has"
        if name == "claim":
            claims = ", ".join(f"{k} {v}" for k, v in sorted(s["claims"].items())) or "none"
            line += f"  nodes {s['nodes_ready']}/{s['nodes']} ready  claims: {claims}"
        elif name == "allocator":
            line += f"  pending {s['pending']}"
            if s.get("node_records_too_big"):  # services/allocator/node_writer.py (session 32)
                line += (f"  NODE RECORDS TOO BIG: {', '.join(s['node_records_too_big_nodes'])} (the node "
                         "holds more claims than one NATS message lists; its agent binds no new claim there "
                         "until some end)")
        elif s.get("items") is not None:
            line += f"  {s['items']} {'quotas' if name == 'quota' else 'pools'}"
        typer.echo(line)
    typer.echo("  projector        not asked: `gpuledger projection status`")
    if report.get("log_stalled"):
        typer.secho(f"  log              {_stalled_words(report['log_stalled'])}", fg=typer.colors.RED)
    intake = report["intake"]
    if "error" in intake:
        typer.secho(f"  intake           unreadable ({intake['error']})", fg=typer.colors.RED)
        return
    waiting = ", ".join(f"{k} {'?' if v is None else v}" for k, v in intake["waiting"].items())
    line = f"  intake           {intake['stored']} stored; waiting: {waiting}"
    if intake["untaken"]:
        line += (f"; {intake['untaken']} on subjects no consumer takes (published off gpu.intake.claim[.<system>]: "
                 "never handled)")
    typer.echo(line)
    if intake.get("full"):
        typer.secho(f"  intake           FULL ({intake['full']}): {_FULL_WORDS}", fg=typer.colors.RED)


_FULL_WORDS = ("nats-server refuses every new claim published to it (503 maximum messages/bytes exceeded) "
               "until the claim service drains it; GPULEDGER_INTAKE_MAX_MSGS / _MAX_BYTES set the limits")


def _stalled_words(stalled: dict) -> str:
    return (f"nothing stored for {stalled['idle_s']:.0f} s while {stalled['nodes_ready']} nodes are ready "
            f"(their heartbeats, or the allocator's NodeLost, are due within {stalled['limit_s'] / 2:.0f} s): "
            "nats-server is not storing (a full disk? its log says), or the node agents and the allocator "
            "are both stopped")


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(url: Optional[str] = NatsUrl,
               as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
               timeout: float = typer.Option(2.0, "--timeout", min=0, help="seconds each service has to answer")) -> None:
        """Whether each service answers and how far it has read the log; the intake's backlog.
        Exits 1 when a service does not answer, when the log has stored nothing for twice
        GPULEDGER_NODE_TIMEOUT_S while nodes are ready, when the intake is full, or when the
        allocator could not write a node's record (too many claims on one node)."""
        report = run(gather_status(nats_url(url), timeout))
        print_json(report) if as_json else _print(report)
        if any(s["up"] is None for s in report["services"].values()):
            die("NATS refused this user the services' status: use the ops user's URL "
                "(GPULEDGER_NATS_URL, `gpuledger nats creds ops`)")
        down = [name for name, s in report["services"].items() if s["up"] is False]
        problems = [f"not answering: {', '.join(down)}"] if down else []
        if report.get("log_stalled"):
            problems.append(f"the log is not moving: {_stalled_words(report['log_stalled'])}")
        if report["intake"].get("full"):
            problems.append(f"the intake is full ({report['intake']['full']}): {_FULL_WORDS}")
        too_big = (report["services"].get("allocator") or {}).get("node_records_too_big")
        if too_big:
            problems.append(f"{too_big} node records too big to write: a node's agent binds no new claim")
        if problems:
            die("; ".join(problems))
