"""How `gpuledger quota ...` prints statuses, the tree, drift and the recent quota decisions."""

from __future__ import annotations

import typer
from rich.table import Table

from gpuledger_cli.tables import table_console

SOURCES = {"own": "own", "cohort": "cohort", "default": "default", "none": "none (unlimited)"}


def print_status(status: dict) -> None:
    head = status["namespace"]
    if status.get("source") in ("default", "none", "cohort"):
        head += f" [{SOURCES[status['source']]}]"
    if status.get("parent"):
        head += f" (parent {status['parent']})"
    if status.get("children"):
        head += f" (parent of {', '.join(status['children'])})"
    typer.echo(head)
    for use in status["resources"]:
        pct = f"  {use['available_percent']:g}% available" if "available_percent" in use else ""
        typer.echo(f"  {use['resource']:<13} {use['shown']}{pct}")
    if status.get("parent"):
        typer.echo(f"  limits in {status['parent']}: {_tree_limits(status.get('spec', {}))}")
    for name, amount in status.get("borrowed", {}).items():
        typer.echo(f"  borrowing {name}: {amount:g}")
    if status.get("share"):
        typer.echo(f"  fair share {status['share']:g}")
    for condition in status["conditions"]:
        message = f": {condition['message']}" if condition.get("message") else ""
        typer.echo(f"  {condition['type']}={condition['status']} ({condition['reason']}){message}")


def _tree_limits(spec: dict) -> str:
    """Borrowing and lending limits per resource. JSON leaves defaults out: no borrowing_limit at
    all is the default (borrow nothing); inside one, a missing resource is unlimited (None); a
    missing lending limit lends all its unused quota."""
    borrow = spec.get("borrowing_limit", {"tflops": 0.0, "vram_mib": 0})
    lend = spec.get("lending_limit", {})
    parts = [f"borrow {_per_resource(borrow, 'unlimited')}", f"lend {_per_resource(lend, 'all unused')}"]
    weight = spec.get("fair_sharing_weight", 1.0)
    return ", ".join(parts + ([f"fair sharing weight {weight:g}"] if weight != 1.0 else []))


def _per_resource(value: dict, missing: str) -> str:
    tflops, vram = value.get("tflops"), value.get("vram_mib")
    if tflops == 0 and vram == 0:
        return "nothing"
    shown_tflops = missing if tflops is None else f"{tflops:g}"
    shown_vram = missing if vram is None else f"{vram / 1024:g}Gi"
    return shown_vram if shown_tflops == shown_vram else f"TFLOPS {shown_tflops}, VRAM {shown_vram}"


def print_table(statuses: list[dict]) -> None:
    """One row per namespace, children indented under their parent (roots in name order)."""
    table = Table("namespace", "quota", "parent", "tflops", "vram", "workers", "share", "conditions")
    for status, depth in tree_order(statuses):
        use = {r["resource"]: r["shown"] for r in status["resources"]}
        table.add_row("  " * depth + status["namespace"], SOURCES.get(status.get("source", ""), ""),
                      status.get("parent", ""), use["tflops"], use["vram"], use["workers"],
                      f"{status.get('share', 0):g}", conditions_cell(status))
    table_console().print(table)


def tree_order(statuses: list[dict]) -> list[tuple[dict, int]]:
    by_name = {s["namespace"]: s for s in statuses}
    out: list[tuple[dict, int]] = []

    def visit(status: dict, depth: int) -> None:
        out.append((status, depth))
        for child in status.get("children", []):
            if child in by_name:
                visit(by_name[child], depth + 1)

    for status in statuses:
        if status.get("parent", "") not in by_name:
            visit(status, 0)
    return out


def conditions_cell(status: dict) -> str:
    on = [c["type"] for c in status["conditions"] if c["status"] and c["type"] != "Ready"]
    return ", ".join(on) or "Ready"


def recent_line(event: dict) -> str:
    kind = event.get("type")
    if kind == "QuotaBorrowed":
        through = " -> ".join(event.get("through", [])) or event["namespace"]
        return (f"borrowed: {event['namespace']} took {event.get('vram_mib', 0) / 1024:g}Gi beyond its quota "
                f"for {event['claim_id']} ({through} through {event['parent']}), lent by "
                f"{', '.join(event.get('lenders', []))}")
    if kind == "QuotaReclaimed":
        how = "fair sharing" if event.get("rule") == "fair-share" else "quota reclaim"
        return (f"reclaimed ({how}): {event['lender']} took back quota {event['borrower']} borrowed through "
                f"{event['parent']}; {event['claim_id']} evicted for {event.get('beneficiary', '')}")
    if kind == "AllocationUnused":
        return f"released unused: {event['claim_id']}: {event.get('reason', '')}"
    if kind == "ProcessKilled":
        return (f"killed: pid {event['pid']} on {event['node']} {event.get('uuid', '')}: "
                f"{event.get('reason', '')}")
    return f"{kind}: {event}"


def print_default(data: dict) -> None:
    spec = data["spec"]
    total, single = spec.get("total", {}), spec.get("single", {})
    typer.echo("default quota (every namespace without a quota of its own, each on its own):")
    for name, value in (("requests", total.get("requests")), ("limits", total.get("limits")),
                        ("single max requests", single.get("max_requests")),
                        ("single max limits", single.get("max_limits"))):
        if value:
            typer.echo(f"  {name:<19} {_resources(value)}")
    for name, value in (("max workers", total.get("max_workers")), ("max waiting", total.get("max_waiting")),
                        ("single max gpus", single.get("max_gpu_count"))):
        if value is not None:
            typer.echo(f"  {name:<19} {value}")
    if spec.get("preempt_other_namespaces"):
        typer.echo("  priority           may preempt other namespaces' claims")
    applies = data.get("applies_to", [])
    typer.echo(f"  applies to {', '.join(applies) if applies else 'no namespace with use yet'}")


def _resources(value: dict) -> str:
    parts = []
    if value.get("tflops") is not None:
        parts.append(f"{value['tflops']:g} TFLOPS")
    if value.get("vram_mib") is not None:
        parts.append(f"{value['vram_mib'] / 1024:g}Gi VRAM")
    return ", ".join(parts) or "no limit"
