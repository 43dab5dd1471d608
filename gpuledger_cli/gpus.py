"""`gpuledger gpus`: GPU types, groups and prices (the data file), with live availability from the
fleet; pick by budget per hour (`--budget`) or by model size (`--model-size 70B`)."""

from __future__ import annotations

import json
import math
from typing import Optional

import typer

from schemas import subjects
from schemas.catalogue import MODELS, cuda_allowed_on, cuda_recommended_on
from schemas.gpu_types import (BYTES_PER_PARAM, ENV, PRICE_KINDS, GpuTypesError, Option, for_model, groups_of,
                               gpu_types_path, load_gpu_types, model_memory_gib, within_budget)


def register(app: typer.Typer) -> None:
    app.command("gpus")(gpus)


def gpus(
    budget: Optional[float] = typer.Option(None, "--budget", min=0, help="Most to spend per hour (USD) on --count "
                                           "GPUs of one type: only types within it, cheapest first."),
    count: int = typer.Option(1, "--count", min=1, max=64, help="GPUs on one node the budget is for."),
    model_size: str = typer.Option("", "--model-size", help="A model to serve: parameters (70B, 7.5b) or "
                                   "memory (40GiB); suggests groups and how many GPUs of each."),
    dtype: str = typer.Option("fp16", "--dtype", help=f"Weights' type for a size in parameters: "
                              f"{', '.join(BYTES_PER_PARAM)}."),
    price: str = typer.Option("on-demand", "--price", help=f"Which price: {', '.join(PRICE_KINDS)}."),
    live: bool = typer.Option(True, "--live/--no-live", help="Ask the claim service what the fleet has "
                              "free now (--no-live: the data file alone, no NATS)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    nats_url: Optional[str] = typer.Option(None, "--nats-url", envvar="GPULEDGER_NATS_URL",
                                           help="NATS URL (default: env GPULEDGER_NATS_URL, else the "
                                                "running `gpuledger up`'s)"),
) -> None:
    """GPU types, groups, prices and what the fleet has free; pick by --budget or --model-size.

    Shows each type's group, architecture, CUDA versions, prices (community, secure, spot,
    on-demand) and free / total GPUs in the fleet. The data file is schemas/data/gpu_types.yaml, or
    the file $GPULEDGER_GPU_TYPES names (its prices are illustrative: edit them)."""
    if price not in PRICE_KINDS:
        _fail(f"--price: {price!r} is not one of {', '.join(PRICE_KINDS)}")
    try:
        data = load_gpu_types()
    except GpuTypesError as err:
        _fail(str(err))
    types = data.gpu_types
    if model_size:
        try:
            need = model_memory_gib(model_size, dtype)
        except ValueError as err:
            _fail(f"--model-size: {err}")
        options = for_model(types, need, price)
        heading = f"a model needing {need:g} GiB" + (f" ({model_size} at {dtype})" if _in_parameters(model_size) else "")
    elif budget is not None:
        options = within_budget(types, budget, count, price)
        heading = f"{count} GPU(s) within {budget:g} {data.currency.split(' per ')[0]}/h ({price})"
    else:
        options = [Option(t, 1, t.price(price) if t.price(price) is not None else math.inf) for t in types]
        heading = ""
    fleet = _availability(nats_url) if live else None
    rows = [_row(o, fleet, price) for o in options]
    if as_json:
        typer.echo(json.dumps({"prices_are": data.prices_are, "currency": data.currency, "file": str(gpu_types_path()),
                               "groups": groups_of(options), "types": rows}, indent=2))
        return
    _print(rows, heading, data.prices_are, data.currency, fleet is not None, groups_of(options))


def _in_parameters(size: str) -> bool:
    text = size.strip().lower()
    return text.endswith("b") and not text.endswith(("gb", "gib"))


def _availability(url: str | None) -> dict | None:
    import asyncio

    from gpuledger_cli.client import nats_url, request

    return asyncio.run(request(nats_url(url), subjects.query("gpus.availability"), {}, 5.0, "claim"))


def _row(option: Option, fleet: dict | None, price: str) -> dict:
    t = option.type
    arch = MODELS[t.model].arch
    allowed = cuda_allowed_on(arch)
    row = {"group": t.group or "", "model": t.model, "id": t.id, "displayName": t.displayName,
           "architecture": arch, "memoryInGb": t.memoryInGb, "maxGpuCount": t.maxGpuCount,
           "cuda": f"{allowed[0]}+" if allowed else "", "cudaRecommended": cuda_recommended_on(arch),
           "communityPrice": t.price("community"), "securePrice": t.price("secure"),
           "spotPrice": t.price("spot"), "onDemandPrice": t.price("on-demand"),
           "gpus": option.gpus, "perHour": None if math.isinf(option.per_hour) else option.per_hour,
           "price": price}
    if fleet is not None:
        have = fleet.get(t.model, {})
        row["fleet"] = {"free": have.get("free", 0), "cards": have.get("cards", 0),
                        "max_per_node": have.get("max_per_node", 0)}
        if have.get("mig_instances"):  # cards in MIG mode, offered as their instances
            row["fleet"] |= {"mig_free": have["mig_free"], "mig_instances": have["mig_instances"]}
        if have.get("nodes_at_cap"):  # idle cards no claim can get: their node is at its cap of claims
            row["fleet"] |= {"free_at_cap": have.get("free_at_cap", 0), "nodes_at_cap": have["nodes_at_cap"],
                             "nodes_over_cap": have.get("nodes_over_cap", 0)}
    return row


def _in_fleet(fleet: dict) -> str:
    """Whole cards free / in the fleet, and MIG instances (a card in MIG mode is offered as its
    instances only: the demo's four A100s were shown as "none")."""
    parts = [f"{fleet['free']} / {fleet['cards']}"] if fleet["cards"] else []
    if fleet.get("mig_instances"):
        parts.append(f"MIG {fleet['mig_free']} / {fleet['mig_instances']}")
    if fleet.get("nodes_at_cap"):  # (a node at its cap of live claims takes no claim: not free)
        over = fleet.get("nodes_over_cap", 0)
        parts.append(f"{fleet['nodes_at_cap']} node(s) at their cap of claims"
                     + (f" ({over} over it)" if over else "")
                     + (f", {fleet['free_at_cap']} idle there" if fleet.get("free_at_cap") else ""))
    return ", ".join(parts) or "none"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _print(rows: list[dict], heading: str, prices_are: str, currency: str, live: bool, groups: list[str]) -> None:
    from rich.table import Table

    from gpuledger_cli.tables import table_console

    title = f"GPU types for {heading}" if heading else "GPU types"
    table = Table("group", "model", "arch", "GiB", "max/node", "CUDA", "community", "secure", "spot",
                  "on-demand", *(["GPUs", "per hour"] if heading else []), *(["free / in fleet"] if live else []),
                  title=title)
    for r in rows:
        extra = [str(r["gpus"]), _money(r["perHour"])] if heading else []
        if live:
            f = r["fleet"]
            extra.append(_in_fleet(f))
        table.add_row(r["group"] or "-", r["model"], r["architecture"], str(r["memoryInGb"]),
                      str(r["maxGpuCount"]), r["cuda"], _money(r["communityPrice"]), _money(r["securePrice"]),
                      _money(r["spotPrice"]), _money(r["onDemandPrice"]), *extra)
    console = table_console()
    console.print(table)
    if heading and not rows:
        console.print(f"no GPU type fits {heading}")
    elif heading:
        console.print(f"suggested groups, best first: {', '.join(groups) or 'none'}")
    note = f"prices: {currency}" + (f", {prices_are.upper()} (edit {gpu_types_path()} or set {ENV})"
                                    if prices_are else f" from {gpu_types_path()}")
    console.print(note)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)
