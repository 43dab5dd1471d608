"""`gpuledger simulate`: placement quality of the allocator's own core on a GPU cluster trace."""

from __future__ import annotations

import asyncio
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
    live: bool = typer.Option(False, "--live", help="replay through the running system (real NATS, all "
                              "services) and print claims/s and submit-to-allocated latency"),
    nats_url: str = typer.Option(None, "--nats-url", envvar="GPULEDGER_NATS_URL", help="--live: the "
                                 "system to replay through; unset: start one on a temporary folder"),
    speed: float = typer.Option(None, "--speed", min=0, help="--live: clock acceleration (trace seconds per "
                                "wall second); default 1000"),
    limit: int = typer.Option(None, "--limit", min=1, help="--live: only the first N pods by creation time"),
    max_gap: float = typer.Option(None, "--max-gap", min=0, help="--live: shorten idle wall gaps between "
                                  "arrivals to at most this many seconds"),
    drain: float = typer.Option(15.0, "--drain", min=0, help="--live: after the last submit, wait at "
                                "most this many seconds for claims to be allocated"),
    node_prefix: str = typer.Option("live-", "--node-prefix", help="--live: prefix of the trace's node names"),
    speedup: float = typer.Option(1.0, "--speedup", min=0.001, help="--dynamic: divide arrival "
                                  "times by this (run times stay); openb needs ~100 to load the cluster"),
    workers: int = typer.Option(2, "--workers", min=1, max=64, help="processes for the (policy, seed) runs"),
    against: str = typer.Option(None, "--against", help="compare one --policy (default gpuledger) with "
                                "this baseline seed by seed (paired), on the trace and --variant's"),
    variant: list[str] = typer.Option(None, "--variant", help="--against: a variant of the pod list "
                                      "(repeatable; default, share-heavy, multi-gpu-heavy, "
                                      "model-bound-10/30/50, model-scarce-8/15/30, cpu-only-heavy, or all); "
                                      "default: default"),
    variant_seed: int = typer.Option(7, "--variant-seed", help="--against: the seed the variants are "
                                     "drawn with (the protocol's seeds are --seeds)"),
) -> None:
    """Run the allocator's decision core over a trace with the FGD paper's one-pass protocol."""
    from services.allocator.core.scorers import POLICIES
    from simulator import runner
    from simulator.protocol import parse_seeds
    from simulator.trace import TraceError, read_trace

    if speed is not None and not live:
        _fail("--speed: applies to --live (with --dynamic use --speedup)")
    if live and dynamic:
        _fail("--live and --dynamic: pick one (--dynamic replays through the core in this process)")
    if variant and not against:
        _fail("--variant: applies to --against (python -m simulator.variants writes them as files)")
    if against and (live or dynamic or plot):
        _fail("--against: runs the one-pass fill; leave out --live, --dynamic and --plot")
    nodes_path, pods_path = nodes or runner.DEFAULT_NODES, pods or runner.DEFAULT_PODS
    policies = list(policy or runner.ALL_POLICIES)
    if against:
        policies = list(policy or ["gpuledger"])
        if len(policies) != 1:
            _fail(f"--policy: --against compares one policy with the baseline, got {len(policies)}")
        policies.append(against)
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        _fail(f"--policy: unknown {', '.join(unknown)}; known: {', '.join(sorted(POLICIES))}")
    try:
        seed_list = parse_seeds(seeds)
        trace = read_trace(nodes_path, pods_path)
        if dynamic or live:
            trace.require_times("--dynamic" if dynamic else "--live")
    except (ValueError, TraceError) as err:
        _fail(str(err))
    if dynamic:
        _dynamic(trace, policies, seed_list[0], as_json, speedup)
        return
    if live:
        _live(trace, nats_url, policy or [], speed, limit, max_gap, drain, node_prefix, as_json)
        return
    if against:
        _compare(trace, policies[0], against, variant or ["default"], variant_seed, seed_list, workers, as_json)
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
    _print(summaries, trace, seeds, elapsed, as_json, runner.is_published_trace(nodes_path, pods_path))


def _print(summaries, trace, seeds: str, elapsed: float, as_json: bool, on_published_trace: bool) -> None:
    from simulator import report

    if as_json:
        typer.echo(json.dumps(report.to_json(summaries, on_published_trace), indent=2))
        return
    typer.echo(f"trace: {len(trace.nodes)} nodes, {trace.capacity // 1000} GPUs, {len(trace.pods)} pods; "
               f"seeds {seeds}; {elapsed:.0f} s\n")
    typer.echo(report.table(summaries, on_published_trace) + "\n")
    typer.echo(report.curves(summaries) + "\n")
    typer.echo(report.failures(summaries))


def _compare(trace, policy: str, baseline: str, names: list[str], variant_seed: int, seeds: list[int],
             workers: int, as_json: bool) -> None:
    from simulator import compare

    if "all" in names:
        names = compare.variant_names(variant_seed)
    try:
        traces = compare.variant_traces(trace, list(dict.fromkeys(names)), variant_seed)
    except ValueError as err:
        _fail(str(err))
    started, total, done = time.perf_counter(), len(traces) * 2 * len(seeds), []

    def progress(job):
        done.append(job)
        if not as_json:
            typer.echo(f"  {len(done)}/{total} {job[0]} {job[1]} seed {job[2]}", err=True)

    result = compare.compare(traces, policy, baseline, seeds, workers, progress)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    typer.echo(f"{policy} against {baseline}, Unallocated GPU % at 100 and 130 % arrived, seeds "
               f"{','.join(map(str, seeds))}, paired = {policy} - {baseline} per seed "
               f"(wins: seeds where {policy} leaves less); {time.perf_counter() - started:.0f} s\n")
    typer.echo(compare.table(result) + "\n")
    typer.echo(compare.per_seed(result))


def _live(trace, nats_url, policies: list[str], speed, limit, max_gap, drain, node_prefix, as_json) -> None:
    from simulator.live import LiveError, LiveOptions, run_live
    from simulator.live_plan import PlanError, check_options

    if len(policies) > 1:
        _fail(f"--policy: --live runs one policy (the started system's allocator), got {len(policies)}")
    speed = 1000.0 if speed is None else speed
    options = LiveOptions(speed=speed, limit=limit, max_gap=max_gap, drain_s=drain, node_prefix=node_prefix)
    try:
        check_options(speed, limit, max_gap, node_prefix)  # before a system is started for nothing
        try:
            from uvloop import run as run_loop  # the observer's own overhead is part of the latency
        except ImportError:
            run_loop = asyncio.run
        report = run_loop(run_live(trace, nats_url, options, policies[0] if policies else None,
                                   progress=lambda line: typer.echo(line, err=True)))
    except (LiveError, PlanError) as err:
        _fail(str(err))
    except KeyboardInterrupt:
        _fail("interrupted" + ("; claims of this run not yet released stay held on that system"
                               if nats_url else "; the system started for the run was stopped"))
    typer.echo(report.to_json() if as_json else report.text())


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
