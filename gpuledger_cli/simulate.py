"""`gpuledger simulate`: placement quality of the allocator's own core on a GPU cluster trace."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def simulate(
    nodes: Path = typer.Option(None, "--nodes", help="node list CSV (openb format); default: "
                               "../shared/data/openb/openb_node_list_gpu_node.csv beside the checkout"),
    pods: Path = typer.Option(None, "--pods", help="pod list CSV (openb format); default: "
                              "../shared/data/openb/openb_pod_list_default.csv"),
    policy: list[str] = typer.Option(None, "--policy", help="policy to run (repeatable); default: "
                                     "random dotprod gpu-packing gpu-clustering bestfit fgd gpuledger"),
    seeds: str = typer.Option("42-51", "--seeds", help="seeds, e.g. 42-51 or 42,45"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
    plot: Path = typer.Option(None, "--plot", help="write the allocation curves to this PNG"),
    dynamic: bool = typer.Option(False, "--dynamic", help="replay arrivals and departures by time "
                                 "(pending queue when full) instead of the one-pass fill"),
    live: bool = typer.Option(False, "--live", help="replay through the running system (not built yet)"),
    speedup: float = typer.Option(1.0, "--speedup", min=0.001, help="--dynamic: divide arrival "
                                  "times by this (run times stay); openb needs ~100 to load the cluster"),
    workers: int = typer.Option(2, "--workers", min=1, max=64, help="processes for the (policy, seed) runs"),
) -> None:
    """Run the allocator's decision core over a trace with the FGD paper's one-pass protocol."""
    from services.allocator.core.scorers import POLICIES
    from simulator import runner
    from simulator.protocol import parse_seeds
    from simulator.trace import TraceError, read_trace

    if live:
        _fail("--live is not built yet: it needs the openb nodes registered in a running system; "
              "use --dynamic for the same replay through the core")
    nodes_path, pods_path = nodes or runner.DEFAULT_NODES, pods or runner.DEFAULT_PODS
    policies = list(policy or runner.ALL_POLICIES)
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        _fail(f"--policy: unknown {', '.join(unknown)}; known: {', '.join(sorted(POLICIES))}")
    try:
        seed_list = parse_seeds(seeds)
        trace = read_trace(nodes_path, pods_path)
    except (ValueError, TraceError) as err:
        _fail(str(err))
    if dynamic:
        _dynamic(trace, policies, seed_list[0], as_json, speedup)
        return
    started = time.perf_counter()
    done = []

    def progress(job):
        done.append(job)
        if not as_json:
            typer.echo(f"  {len(done)}/{len(policies) * len(seed_list)} {job[0]} seed {job[1]}", err=True)

    summaries = runner.run_all(nodes_path, pods_path, policies, seed_list, workers, progress)
    elapsed = time.perf_counter() - started
    if plot:
        from simulator.plot import plot_curves

        plot_curves(summaries, plot, f"{Path(pods_path).name}, seeds {seeds}")
    _print(summaries, trace, seeds, elapsed, as_json)


def _print(summaries, trace, seeds: str, elapsed: float, as_json: bool) -> None:
    from simulator import report

    if as_json:
        typer.echo(json.dumps(report.to_json(summaries), indent=2))
        return
    typer.echo(f"trace: {len(trace.nodes)} nodes, {trace.capacity // 1000} GPUs, {len(trace.pods)} pods; "
               f"seeds {seeds}; {elapsed:.0f} s\n")
    typer.echo(report.table(summaries) + "\n")
    typer.echo(report.curves(summaries) + "\n")
    typer.echo(report.failures(summaries))


def _dynamic(trace, policies: list[str], seed: int, as_json: bool, speedup: float) -> None:
    from simulator.dynamic import over_time, replay

    out = {}
    for name in policies:
        r = replay(trace, name, seed, speedup=speedup)
        passes = max(r.passes, 1)
        out[name] = {
            "mean_utilisation": r.mean_utilisation, "peak_utilisation": max(s[1] for s in r.samples),
            "pending_p50_s": r.percentile(50), "pending_p99_s": r.percentile(99),
            "never_placed": r.never_placed, "pods": r.pods, "ms_per_pass": 1000 * r.decide_seconds / passes,
            "over_time": [{"t": t, "util": u, "pending": p, "frag": f} for t, u, p, f in over_time(r)],
        }
        if not as_json:
            o = out[name]
            typer.echo(f"{name}: utilisation mean {o['mean_utilisation']:.1f} % peak {o['peak_utilisation']:.1f} %"
                       f"; pending p50 {o['pending_p50_s']:.0f} s p99 {o['pending_p99_s']:.0f} s; "
                       f"never placed {r.never_placed}/{r.pods}; {o['ms_per_pass']:.2f} ms per decide pass")
            typer.echo("  t (days) | util % | pending | frag % GPUs")
            for t, u, p, f in over_time(r):
                typer.echo(f"  {t / 86400:8.1f} | {u:6.1f} | {p:7d} | {f:6.2f}")
    if as_json:
        typer.echo(json.dumps(out, indent=2))
    sys.stdout.flush()
