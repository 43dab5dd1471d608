"""`gpuledger quota ...`: set, get, list, delete and status of namespace GPU quotas."""

from __future__ import annotations

from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from gpuledger_cli.client import NatsUrl, nats_url, print_json, request, run
from schemas import subjects

quota_app = typer.Typer(help="Namespace GPU quotas: limits, status, alerts, borrowing, drift.",
                        no_args_is_help=True)
JsonOpt = typer.Option(False, "--json", help="print JSON")


def _opt(help_text: str):
    return typer.Option(None, help=help_text)


@quota_app.command("set")
def set_quota(
    namespace: str = typer.Argument(..., help="namespace the quota applies to"),
    requests_tflops: Optional[str] = _opt("total TFLOPS requests, e.g. 1000"),
    requests_vram: Optional[str] = _opt("total VRAM requests, e.g. 100Gi"),
    limits_tflops: Optional[str] = _opt("total TFLOPS limits"),
    limits_vram: Optional[str] = _opt("total VRAM limits, e.g. 200Gi"),
    max_workers: Optional[int] = _opt("most claims (workers) at once"),
    alert_threshold: float = typer.Option(95.0, "--alert-threshold", help="alert at this % of any limit"),
    single_max_requests_tflops: Optional[str] = _opt("per-workload TFLOPS requests"),
    single_max_requests_vram: Optional[str] = _opt("per-workload VRAM requests, e.g. 16Gi"),
    single_max_limits_tflops: Optional[str] = _opt("per-workload TFLOPS limits"),
    single_max_limits_vram: Optional[str] = _opt("per-workload VRAM limits, e.g. 32Gi"),
    single_max_gpu_count: Optional[int] = _opt("most GPUs per workload"),
    parent: str = typer.Option("", help="team or cohort whose unused quota this namespace may borrow"),
    borrowing_limit_tflops: Optional[str] = _opt("TFLOPS it may borrow ('unlimited'; default 0)"),
    borrowing_limit_vram: Optional[str] = _opt("VRAM it may borrow, e.g. 64Gi ('unlimited'; default 0)"),
    as_json: bool = JsonOpt,
    url: Optional[str] = NatsUrl,
) -> None:
    """Create or replace a namespace's quota (unset limits mean no limit)."""
    body = {"namespace": namespace, "requests_tflops": requests_tflops, "requests_vram": requests_vram,
            "limits_tflops": limits_tflops, "limits_vram": limits_vram, "max_workers": max_workers,
            "alert_threshold_percent": alert_threshold,
            "single_max_requests_tflops": single_max_requests_tflops,
            "single_max_requests_vram": single_max_requests_vram,
            "single_max_limits_tflops": single_max_limits_tflops,
            "single_max_limits_vram": single_max_limits_vram, "single_max_gpu_count": single_max_gpu_count,
            "parent": parent, "borrowing_limit_tflops": borrowing_limit_tflops,
            "borrowing_limit_vram": borrowing_limit_vram}
    data = run(request(nats_url(url), subjects.command("quota.set"),
                       {k: v for k, v in body.items() if v is not None}))
    if as_json:
        print_json(data)
        return
    typer.echo(f"quota {namespace} set (seq {data['seq']})")
    for warning in data.get("warnings", []):
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW)
    _print_status(data["status"])


@quota_app.command("get")
def get_quota(namespace: str = typer.Argument(..., help="the namespace"), as_json: bool = JsonOpt, url: Optional[str] = NatsUrl) -> None:
    """Show a namespace's quota and its status."""
    data = run(request(nats_url(url), subjects.command("quota.get"), {"namespace": namespace}))
    if as_json:
        print_json(data)
        return
    _print_status(data)


@quota_app.command("list")
def list_quotas(parent: str = typer.Option("", help="only this parent and its children"),
                as_json: bool = JsonOpt, url: Optional[str] = NatsUrl) -> None:
    """List quotas with their use."""
    data = run(request(nats_url(url), subjects.command("quota.list"), {"parent": parent}))
    if as_json:
        print_json(data)
        return
    table = Table("namespace", "parent", "tflops", "vram", "workers", "conditions")
    for status in data:
        use = {r["resource"]: r["shown"] for r in status["resources"]}
        table.add_row(status["namespace"], status.get("parent", ""), use["tflops"], use["vram"],
                      use["workers"], _conditions(status))
    Console().print(table)


@quota_app.command("delete")
def delete_quota(namespace: str = typer.Argument(..., help="the namespace"), as_json: bool = JsonOpt, url: Optional[str] = NatsUrl) -> None:
    """Delete a namespace's quota (its claims are no longer limited)."""
    data = run(request(nats_url(url), subjects.command("quota.delete"), {"namespace": namespace}))
    if as_json:
        print_json(data)
        return
    typer.echo(f"quota {namespace} deleted (seq {data['seq']})")
    for warning in data.get("warnings", []):
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW)


@quota_app.command("status")
def quota_status(namespace: str = typer.Argument("", help="one namespace (default: all)"),
                 as_json: bool = JsonOpt, url: Optional[str] = NatsUrl) -> None:
    """Use, conditions, alerts, borrowing and drift (log versus what node agents observe)."""
    data = run(request(nats_url(url), subjects.query("quota.status"), {"namespace": namespace}))
    if as_json:
        print_json(data)
        return
    for status in data["quotas"]:
        _print_status(status)
    for event in data.get("recent", []):
        typer.echo(_recent_line(event))
    drift = data.get("drift", [])
    typer.echo(f"drift ({len(drift)} open, stale after {data['stale_after_s']:g}s):" if drift
               else "drift: none (the log and the node agents agree)")
    for d in drift:
        typer.echo(f"  {d['kind']} on {d['node']}: {d.get('detail', '')}")
    typer.echo(f"as of log sequence {data['as_of_seq']}")


def _print_status(status: dict) -> None:
    head = f"{status['namespace']}" + (f" (parent {status['parent']})" if status.get("parent") else "")
    if status.get("children"):
        head += f" (parent of {', '.join(status['children'])})"
    typer.echo(head)
    for use in status["resources"]:
        pct = f"  {use['available_percent']:g}% available" if "available_percent" in use else ""
        typer.echo(f"  {use['resource']:<13} {use['shown']}{pct}")
    for name, amount in status.get("borrowed", {}).items():
        typer.echo(f"  borrowing {name}: {amount:g}")
    for condition in status["conditions"]:
        message = f": {condition['message']}" if condition.get("message") else ""
        typer.echo(f"  {condition['type']}={condition['status']} ({condition['reason']}){message}")


def _conditions(status: dict) -> str:
    return ", ".join(f"{c['type']}" for c in status["conditions"] if c["status"] and c["type"] != "Ready") or "Ready"


def _recent_line(event: dict) -> str:
    if event.get("type") == "QuotaBorrowed":
        return (f"borrowed: {event['namespace']} took {event.get('vram_mib', 0) / 1024:g}Gi beyond its quota "
                f"for {event['claim_id']} through {event['parent']}, lent by {', '.join(event.get('lenders', []))}")
    return (f"reclaimed: {event['lender']} took back quota {event['borrower']} borrowed through "
            f"{event['parent']}; {event['claim_id']} evicted for {event.get('beneficiary', '')}")


def register(app: typer.Typer) -> None:
    app.add_typer(quota_app, name="quota")
