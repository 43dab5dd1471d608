"""`gpuledger quota ...`: set, get, list, delete, status and the default quota (printing: quota_show)."""

from __future__ import annotations

from typing import Optional

import typer

from gpuledger_cli.client import NatsUrl, nats_url, print_json, request, run
from gpuledger_cli.quota_apply import apply_files, print_results
from gpuledger_cli.quota_show import print_default, print_status, print_table, recent_line
from schemas import subjects

quota_app = typer.Typer(help="Namespace GPU quotas and cohort trees: limits, status, alerts, borrowing, "
                             "reconciliation, drift.", no_args_is_help=True)
default_app = typer.Typer(help="The default quota of namespaces without one of their own.", no_args_is_help=True)
JsonOpt = typer.Option(False, "--json", help="print JSON")


def _opt(help_text: str):
    return typer.Option(None, help=help_text)


def _count(help_text: str):
    return typer.Option(None, min=0, help=help_text)


@quota_app.command("set")
def set_quota(
    namespace: str = typer.Argument(..., help="namespace (or cohort) the quota applies to"),
    requests_tflops: Optional[str] = _opt("total TFLOPS requests, e.g. 1000"),
    requests_vram: Optional[str] = _opt("total VRAM requests, e.g. 100Gi"),
    limits_tflops: Optional[str] = _opt("total TFLOPS limits"),
    limits_vram: Optional[str] = _opt("total VRAM limits, e.g. 200Gi"),
    max_workers: Optional[int] = _count("most claims (workers) at once"),
    max_waiting: Optional[int] = _count("most claims waiting at once (one more that cannot be placed is "
                                        "rejected: quota-waiting-exceeded); default: no limit"),
    alert_threshold: float = typer.Option(95.0, "--alert-threshold", min=0, help="alert at this % of any limit"),
    single_max_requests_tflops: Optional[str] = _opt("per-workload TFLOPS requests"),
    single_max_requests_vram: Optional[str] = _opt("per-workload VRAM requests, e.g. 16Gi"),
    single_max_limits_tflops: Optional[str] = _opt("per-workload TFLOPS limits"),
    single_max_limits_vram: Optional[str] = _opt("per-workload VRAM limits, e.g. 32Gi"),
    single_max_gpu_count: Optional[int] = _count("most GPUs per workload"),
    parent: str = typer.Option("", help="cohort (team, org) whose unused quota this one may borrow; "
                                        "cohorts may have parents too"),
    borrowing_limit_tflops: Optional[str] = _opt("TFLOPS it may borrow ('unlimited'; default 0)"),
    borrowing_limit_vram: Optional[str] = _opt("VRAM it may borrow, e.g. 64Gi ('unlimited'; default 0)"),
    lending_limit_tflops: Optional[str] = _opt("most of its unused TFLOPS others may use (default: all)"),
    lending_limit_vram: Optional[str] = _opt("most of its unused VRAM others may use, e.g. 16Gi (default: all)"),
    fair_sharing_weight: float = typer.Option(1.0, min=0, help="fair sharing weight among siblings (Kueue's "
                                                        "fairSharing.weight; 0: borrows last)"),
    preempt_other_namespaces: bool = typer.Option(
        False, "--preempt-other-namespaces",
        help="its claims' priority may evict other namespaces' lower-priority claims (default: priority "
             "orders and preempts within the namespace only)"),
    as_json: bool = JsonOpt,
    url: Optional[str] = NatsUrl,
) -> None:
    """Create or replace a namespace's or a cohort's quota (unset limits mean no limit)."""
    body = {"namespace": namespace, **_quantities(locals()), "parent": parent,
            "borrowing_limit_tflops": borrowing_limit_tflops, "borrowing_limit_vram": borrowing_limit_vram,
            "lending_limit_tflops": lending_limit_tflops, "lending_limit_vram": lending_limit_vram,
            "fair_sharing_weight": fair_sharing_weight, "preempt_other_namespaces": preempt_other_namespaces}
    data = run(request(nats_url(url), subjects.command("quota.set"),
                       {k: v for k, v in body.items() if v is not None}))
    if as_json:
        print_json(data)
        return
    typer.echo(f"quota {namespace} set (seq {data['seq']})")
    _warn(data)
    print_status(data["status"])


_QUANTITIES = ("requests_tflops", "requests_vram", "limits_tflops", "limits_vram", "max_workers", "max_waiting",
               "single_max_requests_tflops", "single_max_requests_vram", "single_max_limits_tflops",
               "single_max_limits_vram", "single_max_gpu_count")


def _quantities(given: dict) -> dict:
    return {**{k: given[k] for k in _QUANTITIES}, "alert_threshold_percent": given["alert_threshold"]}


def _warn(data: dict) -> None:
    for warning in data.get("warnings", []):
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW)


@quota_app.command("apply")
def apply_quotas(
    files: list[str] = typer.Option(..., "--filename", "-f",
                                    help="manifest file (YAML, several documents allowed, or JSON; '-' "
                                         "reads stdin): the seed's GPUResourceQuota or a GPUResourceCohort; "
                                         "repeat for several files"),
    namespace: str = typer.Option("", "--namespace", "-n",
                                  help="namespace of a GPUResourceQuota without metadata.namespace"),
    dry_run: bool = typer.Option(False, "--dry-run", help="validate against the log, store nothing"),
    as_json: bool = JsonOpt,
    url: Optional[str] = NatsUrl,
) -> None:
    """Create or replace quotas and cohorts from manifests, all of them or none."""
    data = apply_files(nats_url(url), files, namespace, dry_run)
    if as_json:
        print_json(data)
        return
    print_results(data)


@quota_app.command("get")
def get_quota(namespace: str = typer.Argument(..., help="namespace or cohort"), as_json: bool = JsonOpt,
              url: Optional[str] = NatsUrl) -> None:
    """Show the quota that governs a namespace (its own, its cohort's or the default) and its status."""
    data = run(request(nats_url(url), subjects.command("quota.get"), {"namespace": namespace}))
    if as_json:
        print_json(data)
        return
    print_status(data)


@quota_app.command("list")
def list_quotas(parent: str = typer.Option("", help="only this cohort and everything below it"),
                as_json: bool = JsonOpt, url: Optional[str] = NatsUrl) -> None:
    """Every namespace with a quota, in a cohort tree or with use, as a tree."""
    data = run(request(nats_url(url), subjects.command("quota.list"), {"parent": parent}))
    if as_json:
        print_json(data)
        return
    if not data:
        typer.echo("no quotas, cohorts or namespaces with use" + (f" under {parent}" if parent else ""))
        return
    print_table(data)


@quota_app.command("delete")
def delete_quota(namespace: str = typer.Argument(..., help="namespace or cohort"), as_json: bool = JsonOpt,
                 url: Optional[str] = NatsUrl) -> None:
    """Delete a namespace's quota (its claims then fall under the default quota, if any)."""
    data = run(request(nats_url(url), subjects.command("quota.delete"), {"namespace": namespace}))
    if as_json:
        print_json(data)
        return
    typer.echo(f"quota {namespace} deleted (seq {data['seq']})")
    _warn(data)


@quota_app.command("status")
def quota_status(namespace: str = typer.Argument("", help="one namespace (default: all)"),
                 as_json: bool = JsonOpt, url: Optional[str] = NatsUrl) -> None:
    """Use, conditions, alerts, borrowing, reconciliation and drift (log versus node agents)."""
    data = run(request(nats_url(url), subjects.query("quota.status"), {"namespace": namespace}))
    if as_json:
        print_json(data)
        return
    for status in data["quotas"]:
        print_status(status)
    if data.get("default") and not namespace:
        typer.echo("a default quota applies to namespaces without their own (gpuledger quota default get)")
    for event in data.get("recent", []):
        typer.echo(recent_line(event))
    drift = data.get("drift", [])
    typer.echo(f"drift ({len(drift)} open, stale after {data['stale_after_s']:g}s):" if drift
               else "drift: none (the log and the node agents agree)")
    for d in drift:
        typer.echo(f"  {d['kind']} on {d['node']}: {d.get('detail', '')}")
    typer.echo(f"as of log sequence {data['as_of_seq']}")


@default_app.command("set")
def set_default(
    requests_tflops: Optional[str] = _opt("TFLOPS requests of each namespace, e.g. 100"),
    requests_vram: Optional[str] = _opt("VRAM requests of each namespace, e.g. 80Gi"),
    limits_tflops: Optional[str] = _opt("TFLOPS limits of each namespace"),
    limits_vram: Optional[str] = _opt("VRAM limits of each namespace"),
    max_workers: Optional[int] = _count("most claims (workers) of each namespace at once"),
    max_waiting: Optional[int] = _count("most claims of each namespace waiting at once (default: no limit)"),
    alert_threshold: float = typer.Option(95.0, "--alert-threshold", min=0, help="alert at this % of any limit"),
    single_max_requests_tflops: Optional[str] = _opt("per-workload TFLOPS requests"),
    single_max_requests_vram: Optional[str] = _opt("per-workload VRAM requests"),
    single_max_limits_tflops: Optional[str] = _opt("per-workload TFLOPS limits"),
    single_max_limits_vram: Optional[str] = _opt("per-workload VRAM limits"),
    single_max_gpu_count: Optional[int] = _count("most GPUs per workload"),
    preempt_other_namespaces: bool = typer.Option(
        False, "--preempt-other-namespaces",
        help="the claims of every namespace without a quota of its own may evict other namespaces' "
             "lower-priority claims (default: priority orders and preempts within a namespace only)"),
    as_json: bool = JsonOpt,
    url: Optional[str] = NatsUrl,
) -> None:
    """Set the quota of every namespace that has none of its own (each namespace on its own)."""
    body = {k: v for k, v in _quantities(locals()).items() if v is not None}
    if preempt_other_namespaces:  # sent only when set: a quota service of before session 31 refuses the field
        body["preempt_other_namespaces"] = True
    data = run(request(nats_url(url), subjects.command("quota.default.set"), body))
    if as_json:
        print_json(data)
        return
    typer.echo(f"default quota set (seq {data['seq']})")
    _warn(data)
    print_default(data)


@default_app.command("get")
def get_default(as_json: bool = JsonOpt, url: Optional[str] = NatsUrl) -> None:
    """Show the default quota and the namespaces it governs now."""
    data = run(request(nats_url(url), subjects.command("quota.default.get"), {}))
    if as_json:
        print_json(data)
        return
    print_default(data)


@default_app.command("delete")
def delete_default(as_json: bool = JsonOpt, url: Optional[str] = NatsUrl) -> None:
    """Remove the default quota: namespaces without their own are unlimited again."""
    data = run(request(nats_url(url), subjects.command("quota.default.delete"), {}))
    if as_json:
        print_json(data)
        return
    typer.echo(f"default quota deleted (seq {data['seq']})")


def register(app: typer.Typer) -> None:
    quota_app.add_typer(default_app, name="default")
    app.add_typer(quota_app, name="quota")
