"""`gpuledger claim ...`: submit, release, renew, get, list, explain."""

from __future__ import annotations

import uuid
from typing import Optional

import typer

from gpuledger_cli.client import (NatsUrl, ask, die, local_time, nats_url, open_requester, print_json,
                                  request, run)
from schemas import subjects
from schemas.types import MAX_PRIORITY

claim_app = typer.Typer(help="Submit and manage GPU claims.", no_args_is_help=True)


def _kv(pairs: list[str], option: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            die(f"{option} takes KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key] = value
    return out


@claim_app.command("submit")
def submit(
    namespace: str = typer.Option(..., "--namespace", "-n", help="namespace the claim is charged to"),
    gpus: int = typer.Option(1, min=0, help="whole GPUs (1 with --gpu-milli for a share; 0 = CPU only or "
                                     "tensor-parallel)"),
    model: list[str] = typer.Option([], "--model", help="allowed GPU model, e.g. H100 (repeat, in order)"),
    group: list[str] = typer.Option([], "--group", help="GpuGroup in preference order, e.g. HOPPER_141 "
                                                        "(repeat), or 'any'"),
    gpu_milli: int = typer.Option(1000, min=1, max=1000, help="share of one GPU in thousandths (time-sliced)"),
    gpu_memory: float = typer.Option(0.0, "--gpu-memory", min=0, help="GiB of memory on each GPU (a fraction by memory)"),
    tflops: float = typer.Option(0.0, "--tflops", min=0, help="TFLOPS on each GPU (a share that provides them; "
                                                        "with --gpu-memory the larger share)"),
    limit_tflops: float = typer.Option(0.0, "--limit-tflops", min=0, help="TFLOPS limit of the claim (quota limits)"),
    limit_vram: float = typer.Option(0.0, "--limit-vram", min=0, help="GiB VRAM limit of the claim (quota limits)"),
    model_memory: float = typer.Option(0.0, "--model-memory", min=0, help="GiB a model needs; the allocator picks "
                                                                    "1, 2, 4 or 8 GPUs (tensor parallel)"),
    mig: str = typer.Option("", "--mig", help="MIG profile, e.g. 3g.40gb"),
    cuda: list[str] = typer.Option([], "--cuda", help="allowed CUDA version, e.g. 12.4 (repeat)"),
    pool: str = typer.Option("", help="GPU pool"),
    selector: list[str] = typer.Option([], "--selector", help="node selector KEY=VALUE (repeat)"),
    priority: int = typer.Option(0, min=-MAX_PRIORITY, max=MAX_PRIORITY, help="higher goes first and may preempt lower, within its namespace only (unless its quota sets preempt_other_namespaces)"),
    gang: str = typer.Option("", "--gang", help="gang id: members are placed all-or-nothing"),
    gang_size: int = typer.Option(0, "--gang-size", min=0, help="members the gang needs"),
    lease: float = typer.Option(0.0, "--lease", min=0, help="seconds; the claim expires unless renewed"),
    contiguous: bool = typer.Option(False, "--contiguous", help="every GPU from one NVLink island: wait for "
                                    "one with room rather than span two (without it one island is preferred "
                                    "on the node the policy picks, not required)"),
    cpu_milli: int = typer.Option(0, "--cpu-milli", min=0, help="host CPU the workload needs, in millicores"),
    memory_mib: int = typer.Option(0, "--memory-mib", min=0, help="host memory the workload needs, in MiB"),
    claim_id: Optional[str] = typer.Option(None, "--id", help="claim id (default: a new uuid); "
                                                              "resubmitting an id is idempotent"),
    wait: float = typer.Option(0.0, "--wait", min=0, help="seconds to wait for the decision"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    url: Optional[str] = NatsUrl,
) -> None:
    """Submit a claim; with --wait, print where it was placed (or why it waits). Exits 1 when the
    claim is rejected (a pool that does not exist, a per-workload quota it breaks, ...)."""
    spec = {"claim_id": claim_id or str(uuid.uuid4()), "namespace": namespace, "gpus": gpus,
            "gpu_milli": gpu_milli, "gpu_memory_gib": gpu_memory, "model_memory_gib": model_memory,
            "mig_profile": mig, "models": model, "gpu_groups": group, "cuda_versions": cuda,
            "pool": pool, "node_selector": _kv(selector, "--selector"), "priority": priority,
            "gang_id": gang, "gang_size": gang_size, "lease_seconds": lease, "cpu_milli": cpu_milli,
            "memory_mib": memory_mib, "gpu_tflops": tflops, "limit_tflops": limit_tflops,
            "limit_vram_gib": limit_vram, **({"policy": "contiguous"} if contiguous else {})}
    data = run(request(nats_url(url), subjects.command("claim.submit"),
                       {"claim": spec, "wait_seconds": wait}, timeout=wait + 10))
    _show(data, as_json)
    if data.get("status") == "rejected":  # `claim submit ... --wait 30 && run-job` must not run it
        raise typer.Exit(1)


ClaimId = typer.Argument(..., help="the claim's id, or its first characters when only one claim "
                                   "starts with them")
WholeClaimId = typer.Argument(..., help="the claim's whole id (a prefix of another claim's id is "
                                        "refused, naming it: `job-1` is not `job-10`)")
AsJson = typer.Option(False, "--json", help="print one JSON object")


async def _for_claim(url: str, given: str, subject: str, extra: dict | None = None, *,
                     changes: str = ""):
    """Resolve a typed id or prefix to the one full claim id (the claim service answers), then
    send the command for that id, on one connection. A command that `changes` the claim (release,
    renew) takes the whole id only: `claim release job-1`, for a job-1 that never was, released
    job-10, the one claim whose id starts with it (session 35)."""
    conn = await open_requester(url)
    try:
        found = await ask(conn, subjects.query("claim.resolve"), {"claim_id": given}, service="claim")
        if changes and found["claim_id"] != given:
            typer.echo(f"error: not-found: no claim {given!r}; {found['claim_id']!r} starts with it. "
                       f"To {changes} that claim, give its whole id: gpuledger claim {changes} "
                       f"{found['claim_id']}", err=True)
            raise typer.Exit(1)
        return await ask(conn, subject, {"claim_id": found["claim_id"], **(extra or {})}, service="claim")
    finally:
        await conn.close()


@claim_app.command("release")
def release(claim_id: str = WholeClaimId,
            reason: str = typer.Option("released by holder", help="why, recorded in the log"),
            as_json: bool = AsJson, url: Optional[str] = NatsUrl) -> None:
    """Release a claim (pending or allocated): its GPUs and quota are free again."""
    _show(run(_for_claim(nats_url(url), claim_id, subjects.command("claim.release"), {"reason": reason},
                         changes="release")), as_json)


@claim_app.command("renew")
def renew(claim_id: str = WholeClaimId, as_json: bool = AsJson, url: Optional[str] = NatsUrl) -> None:
    """Renew a claim's lease."""
    _show(run(_for_claim(nats_url(url), claim_id, subjects.command("claim.renew"), changes="renew")),
          as_json)


@claim_app.command("get")
def get(claim_id: str = ClaimId, as_json: bool = AsJson, url: Optional[str] = NatsUrl) -> None:
    """Show one claim."""
    _show(run(_for_claim(nats_url(url), claim_id, subjects.query("claim.get"))), as_json)


@claim_app.command("explain")
def explain(claim_id: str = ClaimId, as_json: bool = AsJson, url: Optional[str] = NatsUrl) -> None:
    """Why a claim waits, was refused, or was placed where it is: ranked reasons, the allocator's
    score and NVLink island, and its history in local time."""
    data = run(_for_claim(nats_url(url), claim_id, subjects.query("claim.explain")))
    if as_json:
        print_json(data)
        return
    _show(data, False)
    if data.get("priority_scope"):
        typer.echo(f"  priority {data.get('priority', 0)}: {data['priority_scope']}")
    if data.get("hint"):
        typer.echo(f"  note: {data['hint']}")
    if data.get("over_cap"):
        typer.echo(f"  note: {data['over_cap']}")
    for line in data.get("placement", []):
        typer.echo(f"  placed: {line}")
    for step in data.get("timeline", []):
        typer.echo(f"  {local_time(step['at'], 'milliseconds')}  {step['event']}")


@claim_app.command("list")
def list_claims(namespace: str = typer.Option("", "--namespace", "-n", help="only this namespace"),
                status: str = typer.Option("", help="only this status: pending, allocated, bound, "
                                                    "released, rejected, evicted, expired, lost"),
                limit: int = typer.Option(1000, min=1, help="at most this many (the newest) per page"),
                cursor: str = typer.Option("", "--cursor", help="the page before this cursor (printed "
                                                                "after a page that has more)"),
                every: bool = typer.Option(False, "--all", help="every page, oldest first (each reply "
                                                                "stays under the message limit)"),
                as_json: bool = typer.Option(False, "--json", help="print one JSON array"),
                url: Optional[str] = NatsUrl) -> None:
    """List claims (newest last), with whole ids: any unique prefix of one works in other commands."""
    query = {"namespace": namespace, "status": status, "limit": limit, "cursor": cursor}
    data, more = run(_pages(nats_url(url), query, every))
    if as_json:
        print_json(data)
    else:
        _table(data)
    if more:
        typer.echo(f"older claims: gpuledger claim list --cursor {more} (or --all)", err=True)


async def _pages(url: str, query: dict, every: bool) -> tuple[list[dict], str]:
    """One page, or with `every` each page before it too (one connection); the claims newest last."""
    conn = await open_requester(url)
    try:
        pages: list[list[dict]] = []
        while True:
            reply = await ask(conn, subjects.query("claim.list"), query, whole=True)
            pages.append(reply.get("data") or [])
            more = reply.get("next", "")
            if not (every and more):
                return [c for p in reversed(pages) for c in p], more
            query = {**query, "cursor": more}
    finally:
        await conn.close()


def _table(claims: list[dict]) -> None:
    from rich.table import Table  # only the commands that draw tables pay for rich

    from gpuledger_cli.tables import table_console

    table = Table()
    # the id is what people copy: never cut or wrapped, whatever the terminal's width
    table.add_column("claim", no_wrap=True, min_width=max((len(c["claim_id"]) for c in claims), default=5))
    for header in ("namespace", "status", "shape", "node", "devices", "submitted", "why"):
        table.add_column(header)
    for c in claims:
        devices = ",".join(str(d["index"]) for d in c.get("devices", []))
        why = c.get("reasons", [{}])[0].get("message", "") if c.get("reasons") else c.get("end_reason", "")
        table.add_row(c["claim_id"], c["namespace"], c["status"], c["shape"], c.get("node", ""), devices,
                      local_time(c.get("submitted_at")), why)
    table_console().print(table)


def _show(data: dict, as_json: bool) -> None:
    if as_json:
        print_json(data)
        return
    typer.echo(f"{data['claim_id']}  {data['status']}  {data.get('shape', '')}")
    if data.get("submitted_at"):
        allocated = f", allocated {local_time(data['allocated_at'])}" if data.get("allocated_at") else ""
        by = f" by system {data['system']}" if data.get("system") else ""
        typer.echo(f"  submitted{by} {local_time(data['submitted_at'])}{allocated}")
    if data.get("node"):
        devices = ", ".join(_device(d) for d in data.get("devices", []))
        typer.echo(f"  node {data['node']}: {devices}")
    for key, value in data.get("env", {}).items():
        typer.echo(f"  {key}={value}")
    if data.get("verdict") == "never-satisfiable":
        typer.echo(f"  {_never_line(data.get('reasons', []))}")
    for reason in data.get("reasons", []):
        typer.echo(f"  - {reason['message']}")
    if data.get("end_reason"):
        typer.echo(f"  ended: {data['end_reason']}")
    # a second release, or a submit repeated, changes nothing: say so rather than print the claim
    # as if this call had done it (session 32: a second `claim release` looked like the first)
    if data.get("already"):
        typer.echo(f"  note: it had already ended ({data['already']}): nothing was done")
    if data.get("duplicate"):
        typer.echo("  note: a claim with this id and content was submitted before: this is that claim")


def _device(d: dict) -> str:
    island = f", {d['island']}" if d.get("island") else ""
    return f"{d['index']} ({d['uuid']}{island})"


def register(app: typer.Typer) -> None:
    app.add_typer(claim_app, name="claim")


def _never_line(reasons: list[dict]) -> str:
    """What a never-satisfiable claim waits for: the quota, or the fleet."""
    first = reasons[0]["message"] if reasons else ""
    if first.startswith("even with nothing in use"):
        return ("never satisfiable under its namespace's quota, even with nothing in use; it waits only for "
                "a quota change (release it, or change the claim)")
    if first.startswith("gang "):
        return ("never satisfiable on this fleet: its gang could never fit at once, even empty; it waits "
                "only for the fleet to change (release it, or change the claim)")
    return ("never satisfiable on this fleet: no node could take it even empty; it waits only for the "
            "fleet to change (release it, or change the claim)")
