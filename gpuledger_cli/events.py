"""`gpuledger events tail|replay`: read the log, filtered by subject, as text or JSON lines."""

from __future__ import annotations

import asyncio
import sys
from typing import Optional

import msgspec
import typer
from rich.console import Console
from rich.progress import Progress

from gpuledger_cli.client import NatsUrl, nats_url, open_log_or_die
from schemas import subjects

events_app = typer.Typer(help="Read the event log.", no_args_is_help=True)


def summarise(event) -> str:
    """One line per event: the fields that matter, not the whole payload."""
    data = msgspec.to_builtins(event)
    data.pop("type", None)
    data.pop("v", None)
    if "decisions" in data:
        kinds: dict[str, int] = {}
        for d in data["decisions"]:
            kinds[d["type"]] = kinds.get(d["type"], 0) + 1
        return ", ".join(f"{n} {k}" for k, n in kinds.items())
    if "claim" in data:
        c = data["claim"]
        return f"{c['claim_id']} ns={c['namespace']} gpus={c.get('gpus', 1)}"
    if "devices" in data and "node" in data:
        return f"{data['node']} devices={len(data['devices'])}"
    return " ".join(f"{k}={v}" for k, v in data.items() if k != "at" and not isinstance(v, (list, dict)))


def _line(stored, as_json: bool) -> str:
    if as_json:
        return msgspec.json.encode({"seq": stored.seq, "subject": stored.subject,
                                    "event": stored.event}).decode()
    return (f"{stored.seq:>8} {stored.subject:<36} {type(stored.event).__name__:<22} "
            f"{summarise(stored.event)}")


def subject_filter(value: Optional[str]) -> Optional[str]:
    """A NATS subject filter, checked before it reaches the server (which answered a malformed one
    with a traceback): dot-separated tokens, none empty or with blanks, `*` one whole token, `>`
    the whole last token."""
    if not value:
        return value
    tokens = value.split(".")
    for i, token in enumerate(tokens):
        problem = ("an empty token (tokens are separated by single dots)" if not token
                   else "a blank inside" if any(c.isspace() for c in token)
                   else "'>' before the last token" if token == ">" and i < len(tokens) - 1
                   else f"'{token}': * and > stand for whole tokens" if token not in ("*", ">")
                   and ("*" in token or ">" in token) else "")
        if problem:
            raise typer.BadParameter(f"{value!r} is not a NATS subject filter: {problem} "
                                     "(e.g. gpu.evt.claim.> or gpu.evt.node.*)")
    return value


async def _replay(url: str, from_seq: int, until_seq: Optional[int], subject: Optional[str],
                  as_json: bool, progress: bool) -> int:
    nc, log = await open_log_or_die(url)
    end = until_seq or await log.last_seq()
    count = 0
    out = sys.stdout
    # on stderr, as its condition says: stdout shows other people's control characters as text
    # (safe_output.py), which would break the bar's own cursor moves
    with Progress(console=Console(stderr=True), transient=True, redirect_stdout=False,
                  disable=not progress or not sys.stderr.isatty()) as bar:
        task = bar.add_task("replaying", total=max(end - from_seq + 1, 1))
        async for stored in log.read(from_seq, end, subject):
            out.write(_line(stored, as_json) + "\n")
            count += 1
            bar.update(task, completed=stored.seq - from_seq + 1)
    out.flush()
    await nc.close()
    return count


async def _tail(url: str, from_seq: Optional[int], last: int, subject: Optional[str], as_json: bool) -> None:
    nc, log = await open_log_or_die(url, follow=True)  # rides out a NATS restart
    start = from_seq if from_seq is not None else max(await log.last_seq() - last + 1, 1)
    try:
        async for stored in log.follow(start, subject):
            sys.stdout.write(_line(stored, as_json) + "\n")
            sys.stdout.flush()
    finally:
        await nc.close()


@events_app.command("replay")
def replay(from_seq: int = typer.Option(1, "--from-seq", min=1, help="first sequence to print"),
           until_seq: Optional[int] = typer.Option(None, "--until-seq", min=1, help="last sequence to print"),
           subject: Optional[str] = typer.Option(None, "--subject", callback=subject_filter,
                                                 help=f"filter, e.g. gpu.evt.claim.> or {subjects.DECISIONS}"),
           as_json: bool = typer.Option(False, "--json", help="one JSON object per line"),
           url: Optional[str] = NatsUrl) -> None:
    """Print the log from a sequence to its current end (with a progress bar on a terminal)."""
    if until_seq is not None and until_seq < from_seq:
        raise typer.BadParameter(f"{until_seq} is before --from-seq {from_seq}", param_hint="'--until-seq'")
    asyncio.run(_replay(nats_url(url), from_seq, until_seq, subject, as_json, progress=True))


@events_app.command("tail")
def tail(from_seq: Optional[int] = typer.Option(None, "--from-seq", min=1, help="start at this sequence "
                                               "instead of the last few events"),
         last: int = typer.Option(10, "--last", min=0, help="events before now to show first"),
         subject: Optional[str] = typer.Option(None, "--subject", callback=subject_filter,
                                               help="filter, e.g. gpu.evt.claim.>"),
         as_json: bool = typer.Option(False, "--json", help="one JSON object per line"),
         url: Optional[str] = NatsUrl) -> None:
    """Follow the log live (Ctrl-C to stop)."""
    try:
        asyncio.run(_tail(nats_url(url), from_seq, last, subject, as_json))
    except KeyboardInterrupt:
        pass


def register(app: typer.Typer) -> None:
    app.add_typer(events_app, name="events")
