"""`gpuledger projection status|rebuild` and `gpuledger state at`: the read models and time travel."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from gpuledger_cli.client import NatsUrl, die, nats_url, open_log_or_die, print_json, run
from gpuledger_cli.tables import table_console
from services.projector.db import current_revision, make_engine
from services.projector.models import TABLES, PositionRow, QuotaRow
from services.projector.projector import DEFAULT_NAME
from services.projector.rebuild import rebuild, state_at
from services.projector.replay import parse_time, seq_at_time
from services.projector.store import read_position
from services.projector.summary import state_summary
from shared.jetstream import JetStreamEventLog
from shared.settings import Settings

projection_app = typer.Typer(help="The SQL read models: status and rebuilds.", no_args_is_help=True)
state_app = typer.Typer(help="The allocator's state at any point of the log.", no_args_is_help=True)

DbUrl = typer.Option(None, "--db", envvar="GPULEDGER_DB_URL",
                     help="SQLAlchemy URL of the read models (default: SQLite under the data dir; "
                          "env GPULEDGER_DB_URL)")
Schema = typer.Option(None, "--schema", help="PostgreSQL schema to use (default: the search path)")
err = Console(stderr=True)


# --- helpers ---------------------------------------------------------------------------------------


def _engine(url: str, schema: str | None):
    try:
        return make_engine(url, schema)
    except Exception as error:
        die(f"--db {url!r} is not a usable database URL ({type(error).__name__}: {error})")


def _sqlite_file_or_die(url: str) -> None:
    """Looking at a SQLite file that is not there made it (an empty database in ./.gpuledger, found
    by the next `up` here) and then said there were no read models: the stack keeps them in the
    data folder it was started with, which the CLI does not know (session 29)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    if not Path(parsed.database).exists():
        die(f"no read models in {url}: no such file. A stack started with `gpuledger up --data-dir DIR` "
            "keeps them in DIR: set GPULEDGER_DATA_DIR=DIR (or GPULEDGER_DB_URL as `up` had it), or give --db")


def _check_point(seq: Optional[int], when: Optional[str], seq_flag: str, time_flag: str) -> Optional[float]:
    if seq is not None and when is not None:
        die(f"give {seq_flag} or {time_flag}, not both")
    if seq is not None and seq < 0:
        die(f"{seq_flag} must be 0 or more, got {seq}")
    if when is None:
        return None
    try:
        return parse_time(when)
    except ValueError as error:
        die(f"{time_flag}: {error}")


async def _resolve(log: JetStreamEventLog, seq: Optional[int], when: Optional[float],
                   seq_flag: str) -> tuple[int, int]:
    """(cutoff sequence, the stream's last sequence)."""
    last = await log.last_seq()
    if when is not None:
        return await seq_at_time(log.js, log.stream, last, when), last
    if seq is None:
        return last, last
    if seq > last:
        die(f"{seq_flag} {seq} is past the end of the log (last sequence {last})")
    return seq, last


@contextmanager
def _progress(total: int, label: str, show: bool = True):
    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=err, transient=True, disable=not show or not sys.stderr.isatty())
    with bar:
        task = bar.add_task(label, total=max(total, 1))
        yield lambda seq: bar.update(task, completed=seq)


async def _open_log(url: str):
    return await open_log_or_die(url)


# --- projection status -------------------------------------------------------------------------


@projection_app.command("status")
def status(db: Optional[str] = DbUrl, schema: Optional[str] = Schema,
           as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"), url: Optional[str] = NatsUrl) -> None:
    """The projection's position against the stream's last sequence, and its row counts."""
    db_url = db or Settings().database_url
    _sqlite_file_or_die(db_url)
    engine = _engine(db_url, schema)
    report = {"database": make_url(db_url).render_as_string(hide_password=True),
              "revision": current_revision(engine)}
    if report["revision"] is None:
        die(f"no read models in {report['database']}: start the projector or run "
            f"`gpuledger projection rebuild`")
    report["position"] = read_position(engine, DEFAULT_NAME)
    report["rows"] = _row_counts(engine)
    report["quotas"] = _quota_rows(engine)
    report["stream_last_seq"] = run(_last_seq(nats_url(url)))
    report["behind"] = report["stream_last_seq"] - report["position"]
    engine.dispose()
    if as_json:
        print_json(report)
        return
    typer.echo(f"database  {report['database']} (schema revision {report['revision']})")
    typer.echo(f"position  {report['position']} of {report['stream_last_seq']} "
               f"({report['behind']} behind)")
    typer.echo("rows      " + ", ".join(f"{t} {n}" for t, n in report["rows"].items()))
    quotas = report["quotas"]
    typer.echo(f"quotas    {quotas['namespaces']} namespaces: {quotas['own']} with a quota of their own, "
               f"{quotas['without']} with use and none of their own (the default quota or none; "
               "`gpuledger quota list` shows which)")


def _quota_rows(engine) -> dict[str, int]:
    """The quotas table has a row per namespace with a quota or with use (spec null: none of its
    own), so its row count is not the number of quotas: say both, as `quota list` shows them."""
    with engine.connect() as conn:  # JSON null and SQL NULL both read back as None
        specs = list(conn.execute(select(QuotaRow.spec)).scalars())
    own = sum(spec is not None for spec in specs)
    return {"namespaces": len(specs), "own": own, "without": len(specs) - own}


def _row_counts(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {m.__tablename__: conn.execute(select(func.count()).select_from(m)).scalar()
                for m in TABLES if m is not PositionRow}


async def _last_seq(url: str) -> int:
    nc, log = await _open_log(url)
    try:
        return await log.last_seq()
    finally:
        await nc.close()


# --- projection rebuild ------------------------------------------------------------------------


@projection_app.command("rebuild")
def rebuild_cmd(
    db: Optional[str] = typer.Option(None, "--db", help="target database URL (default: the configured "
                                     "read models; with --until-*, a new SQLite file in the data dir)"),
    schema: Optional[str] = Schema,
    until_seq: Optional[int] = typer.Option(None, "--until-seq", min=1, help="last sequence to project"),
    until_time: Optional[str] = typer.Option(None, "--until-time",
                                             help="project what the log held at this time "
                                                  "(ISO 8601 or unix seconds)"),
    batch: int = typer.Option(5000, "--batch", min=1, help="events per transaction"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
    url: Optional[str] = NatsUrl,
) -> None:
    """Drop and recreate the read models, then replay the log into them (up to a point)."""
    when = _check_point(until_seq, until_time, "--until-seq", "--until-time")
    report = run(_rebuild(nats_url(url), db, schema, until_seq, when, batch))
    if as_json:
        print_json(report)
        return
    typer.echo(f"rebuilt {report['database']}: {report['events']} events up to sequence "
               f"{report['position']} in {report['seconds']:.2f}s ({report['events_per_s']:.0f} events/s)")


async def _rebuild(url: str, db: Optional[str], schema: Optional[str], until_seq: Optional[int],
                   when: Optional[float], batch: int) -> dict:
    nc, log = await _open_log(url)
    try:
        cutoff, _last = await _resolve(log, until_seq, when, "--until-seq")
        target = db or _default_target(until_seq is not None or when is not None, cutoff)
        engine = _engine(target, schema)
        with _progress(cutoff, "projecting") as advance:
            done = await rebuild(log, engine, cutoff, batch=batch, progress=advance)
        engine.dispose()
    finally:
        await nc.close()
    return {"database": make_url(target).render_as_string(hide_password=True), "events": done.events,
            "position": done.position, "seconds": round(done.seconds, 3),
            "events_per_s": round(done.rate, 1)}


def _default_target(time_travel: bool, cutoff: int) -> str:
    settings = Settings()
    if not time_travel:
        return settings.database_url
    path = (settings.data_dir / f"readmodel-at-{cutoff}.db").resolve()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return f"sqlite:///{path}"


# --- state at -----------------------------------------------------------------------------------


@state_app.command("at")
def state_at_cmd(
    seq: Optional[int] = typer.Option(None, "--seq", min=1, help="fold events 1..SEQ"),
    when: Optional[str] = typer.Option(None, "--time", help="fold what the log held at this time "
                                                             "(ISO 8601 or unix seconds)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
    url: Optional[str] = NatsUrl,
) -> None:
    """Rebuild the allocator's state at a sequence or a time: nodes, devices in use, claims, usage."""
    if seq is None and when is None:
        die("give --seq N or --time T")
    moment = _check_point(seq, when, "--seq", "--time")
    summary = run(_state_at(nats_url(url), seq, moment))
    if as_json:
        print_json(summary)
    else:
        _print_summary(summary)


async def _state_at(url: str, seq: Optional[int], when: Optional[float]) -> dict:
    nc, log = await _open_log(url)
    try:
        cutoff, last = await _resolve(log, seq, when, "--seq")
        with _progress(cutoff, "folding") as advance:
            state = await state_at(log, cutoff, progress=advance)
    finally:
        await nc.close()
    summary = state_summary(state)
    summary.update(seq=cutoff, stream_last_seq=last)
    return summary


def _claims_of(node: dict) -> str:
    """Live claims / the node's cap; "over cap" when a cap was lowered below what it holds."""
    text = f"{node['claims']} / {node['max_claims']}" if "max_claims" in node else str(node["claims"])
    return text + (" over cap" if node.get("over_cap") else "")


def _print_summary(summary: dict) -> None:
    out = table_console()
    out.print(f"state at sequence {summary['seq']} (log ends at {summary['stream_last_seq']})")
    out.print("claims: " + (", ".join(f"{k} {v}" for k, v in summary["claims"].items()) or "none"))
    nodes = Table("node", "condition", "lost", "devices", "in use", "claims", title="nodes")
    for n in summary["nodes"]:
        nodes.add_row(n["name"], n["condition"], "yes" if n["lost"] else "", str(n["devices"]),
                      str(n["devices_in_use"]), _claims_of(n))
    out.print(nodes)
    devices = Table("device", "node", "model", "free (milli)", "holders", title="devices in use")
    for d in summary["devices_in_use"]:
        devices.add_row(d["uuid"], d["node"], d["model"], str(d["milli_free"]),
                        ", ".join(f"{c}:{m}" for c, m in d["holders"].items()))
    out.print(devices)
    usage = Table("namespace", "quota", "gpus", "workers", "tflops", "vram MiB", title="namespace usage")
    for ns, u in summary["namespaces"].items():
        usage.add_row(ns, "yes" if u["quota"] else "", str(u["gpus"]), str(u["workers"]),
                      f"{u['tflops']:g}", str(u["vram_mib"]))
    out.print(usage)


def register(app: typer.Typer) -> None:
    app.add_typer(projection_app, name="projection")
    app.add_typer(state_app, name="state")
