"""`gpuledger bench decide|replay`: benchmarks that print figures (JSON on the last line)."""

from __future__ import annotations

import json

import typer

bench_app = typer.Typer(help="Benchmarks (figures are wall clock on this machine).", no_args_is_help=True)


def _emit(result: dict, as_json: bool) -> None:
    if not as_json:
        for key, value in result.items():
            typer.echo(f"{key:>28}: {value}")
    typer.echo(json.dumps(result))


@bench_app.command("decide")
def decide(nodes: int = typer.Option(1000, "--nodes", help="nodes in the synthetic fleet"),
           steps: int = typer.Option(2000, "--steps", help="measured decision passes"),
           policy: str = typer.Option("", "--policy", help="placement policy (default: the allocator's)"),
           seed: int = typer.Option(1, "--seed", help="seed of the fleet and the claim mix"),
           digest: bool = typer.Option(False, "--digest", help="also print a SHA-256 of every decision "
                                       "made (equal digests: a change to the core decided the same)"),
           as_json: bool = typer.Option(False, "--json", help="print the figures as one JSON line")) -> None:
    """Latency of one decision pass at steady state on a synthetic fleet of 8-GPU nodes."""
    from bench.decide import run

    _emit(run(nodes, steps, policy, seed, digest=digest), as_json)


@bench_app.command("replay")
def replay(events: int = typer.Option(1_000_000, "--events"),
           nodes: int = typer.Option(1000, "--nodes"),
           nats_url: str = typer.Option("", "--nats-url", help="use this server (default: an embedded one "
                                        "in a temporary folder)"),
           single: bool = typer.Option(False, "--single-event-messages",
                                       help="write every event as its own message (no EventBatch)"),
           compare: bool = typer.Option(False, "--compare", help="also time nats-py's reader and "
                                        "the eager placement index (the paths replaced)"),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """Rebuild the allocator's state from a log of N events, and from a snapshot of it."""
    from bench.replay import run

    _emit(run(events, nodes, nats_url or None, batched=not single, compare=compare), as_json)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
