"""`gpuledger bench decide|replay|e2e|chaos`: benchmarks that print figures (JSON on the last line)."""

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
def decide(nodes: int = typer.Option(1000, "--nodes", min=1, help="nodes in the synthetic fleet"),
           steps: int = typer.Option(2000, "--steps", min=1, help="measured decision passes"),
           policy: str = typer.Option("", "--policy", help="placement policy (default: the allocator's)"),
           seed: int = typer.Option(1, "--seed", help="seed of the fleet and the claim mix"),
           digest: bool = typer.Option(False, "--digest", help="also print a SHA-256 of every decision "
                                       "made (equal digests: a change to the core decided the same)"),
           unplaceable: int = typer.Option(0, "--unplaceable", min=0, help="first submit this many claims "
                                           "no node can take (they stay pending), to see what they cost"),
           waiting: int = typer.Option(0, "--waiting", min=0, help="first submit this many claims of one "
                                       "namespace for one whole A100 each, a standing queue on a busy "
                                       "model (as A100s free, its first claims take them)"),
           kept: bool = typer.Option(False, "--kept", help="time each pass as the allocator runs it "
                                     "(decide_kept, its batch then kept applied, not rolled back and "
                                     "folded again); default: decide, whose pass includes the rollback"),
           as_json: bool = typer.Option(False, "--json", help="print the figures as one JSON line")) -> None:
    """Latency of one decision pass at steady state on a synthetic fleet of 8-GPU nodes."""
    from bench.decide import run

    _emit(run(nodes, steps, policy, seed, digest=digest, unplaceable=unplaceable, kept=kept, waiting=waiting),
          as_json)


@bench_app.command("replay")
def replay(events: int = typer.Option(1_000_000, "--events", min=1, help="events in the synthetic log"),
           nodes: int = typer.Option(1000, "--nodes", min=1, help="nodes in the synthetic fleet"),
           nats_url: str = typer.Option("", "--nats-url", help="use this server (default: an embedded one "
                                        "in a temporary folder)"),
           single: bool = typer.Option(False, "--single-event-messages",
                                       help="write every event as its own message (no EventBatch)"),
           compare: bool = typer.Option(False, "--compare", help="also time nats-py's reader and "
                                        "the eager placement index (the paths replaced)"),
           headers: bool = typer.Option(False, "--service-headers",
                                        help="store every message with the headers a service's append "
                                        "gives it (Nats-Expected-Stream, message ids), as a real log holds"),
           as_json: bool = typer.Option(False, "--json", help="print the figures as one JSON line")) -> None:
    """Rebuild the allocator's state from a log of N events, and from a snapshot of it."""
    from bench.replay import run

    _emit(run(events, nodes, nats_url or None, batched=not single, compare=compare, headers=headers), as_json)


def _rates(raw: str) -> list[float | None]:
    rates = []
    for part in filter(None, (p.strip() for p in raw.split(","))):
        if part == "max":
            rates.append(None)
            continue
        try:
            rates.append(float(part))
        except ValueError:
            raise typer.BadParameter(f"{part!r} is not a rate (claims/s) or 'max'", param_hint="--rates")
        if rates[-1] <= 0:
            raise typer.BadParameter(f"{part}: a rate must be above 0", param_hint="--rates")
    return rates


@bench_app.command("e2e")
def e2e(claims: int = typer.Option(20_000, "--claims", min=1, help="claims published per run"),
        rate: float = typer.Option(0.0, "--rate", min=0.0, help="claims/s offered, open loop "
                                   "(0: as fast as the intake acknowledges them)"),
        nodes: int = typer.Option(100, "--nodes", min=1, help="simulated 8-GPU nodes (the default "
                                  "leaves room: each claim is released shortly after it is allocated)"),
        hold_ms: float = typer.Option(20.0, "--hold-ms", min=0.0, help="how long a claim holds its "
                                      "GPUs after it is seen allocated, before its release"),
        sweep: bool = typer.Option(False, "--sweep", help="one run per rate of --rates on the same "
                                   "stack, and a table"),
        rates: str = typer.Option("100,300,1000,3000,max", "--rates", help="rates for --sweep "
                                  "(claims/s, 'max' for no limit)"),
        sweep_s: float = typer.Option(10.0, "--sweep-seconds", min=1.0, help="in a sweep, claims per "
                                      "rate are at most rate x this (keeps slow rates short)"),
        drain_s: float = typer.Option(60.0, "--drain-s", min=1.0, help="after the last publish, how "
                                      "long the claims may take to be decided and released"),
        settle_s: float = typer.Option(4.0, "--settle-s", min=0.0, help="after the run, how long the "
                                       "agents get to report stopped workloads before the check"),
        data_dir: str = typer.Option("", "--data-dir", help="run the stack in this folder and keep it "
                                     "(logs in DIR/logs); default: a temporary one, removed after"),
        hops: bool = typer.Option(False, "--hops", help="the services stamp their appends (when the "
                                  "intake message was stored, read, taken; when the allocator folded "
                                  "the claim, when its pass had decided): each claim's latency in ten "
                                  "hops, as `hop_path_ms` and a table"),
        as_json: bool = typer.Option(False, "--json", help="print only the JSON object")) -> None:
    """The whole stack (gpuledger up --demo) under a load of raw JSON claims published to the
    intake: throughput, publish-to-allocated latency, lost and double-booked claims, CPU per claim
    of every process."""
    import asyncio

    from bench.e2e.report import path_table, table, tail_table
    from bench.e2e.run import Options, run_loop, run_on_new_stack

    options = Options(claims=claims, rate=rate or None, nodes=nodes, hold_s=hold_ms / 1000,
                      drain_s=drain_s, settle_s=settle_s, data_dir=data_dir, hops=hops)
    say = (lambda _line: None) if as_json else (lambda line: typer.echo(line, err=True))
    if sweep:
        chosen = _rates(rates)
        runs = [(r, min(claims, int(r * sweep_s)) if r else claims) for r in chosen]
        results = run_loop(run_on_new_stack(options, runs, say))
        if not as_json:
            typer.echo(table(results))
        typer.echo(json.dumps(results))
        return
    (result,) = run_loop(run_on_new_stack(options, [(options.rate, claims)], say))
    if hops and not as_json:
        typer.echo(path_table(result.get("hop_path_ms", {})), err=True)
    if not as_json:
        typer.echo(tail_table(result.get("tail", {}), result.get("tail_cpu_wait_ms_per_s", {})), err=True)
    _emit(result, as_json)


@bench_app.command("chaos")
def chaos(claims: int = typer.Option(2000, "--claims", min=1, help="claims published over the run, "
                                     "in one burst per fault and one more"),
          rate: float = typer.Option(200.0, "--rate", min=1.0, help="claims/s offered during a burst"),
          nodes: int = typer.Option(20, "--nodes", min=1, help="simulated 8-GPU nodes"),
          hold_ms: float = typer.Option(50.0, "--hold-ms", min=0.0, help="how long a claim holds its "
                                        "GPUs after it is seen allocated, before its release"),
          kills: str = typer.Option("claim,allocator,quota,pool-controller,projector,node-agents",
                                    "--kill", help="services to kill -9, one per burst, in this order "
                                    "('' for none)"),
          nats_outage: bool = typer.Option(True, "--nats-outage/--no-nats-outage", help="also kill -9 "
                                           "nats-server for a 3 s outage"),
          long_outage: bool = typer.Option(False, "--long-outage", help="also a 60 s nats-server "
                                           "outage (the run then takes minutes)"),
          cluster: int = typer.Option(0, "--cluster", min=0, max=7, help="run the stack on this many "
                                      "nats-servers as one cluster (up --cluster); a nats outage then "
                                      "kills the server leading the event log"),
          victim: str = typer.Option("leader", "--cluster-victim", help="on a cluster, the server a nats "
                                     "outage kills: 'leader' (of the event log) or 'follower'"),
          fuzz: bool = typer.Option(True, "--fuzz/--no-fuzz", help="mix bad payloads into the intake "
                                    "(invalid UTF-8, deep nesting, huge, wrong types, float limits)"),
          forge: bool = typer.Option(True, "--forge/--no-forge", help="publish events forged on "
                                     "subjects their type does not belong on"),
          resubmit: float = typer.Option(0.02, "--resubmit-share", min=0.0, max=1.0, help="share of "
                                         "accepted claims resubmitted identical (must be stored once)"),
          conflicting: bool = typer.Option(True, "--conflicting/--no-conflicting", help="resubmit those "
                                           "claims' ids with another spec too (must be refused without "
                                           "touching the claim)"),
          drain_s: float = typer.Option(90.0, "--drain-s", min=1.0, help="after the last burst, how long "
                                        "accepted claims may take to be decided"),
          data_dir: str = typer.Option("", "--data-dir", help="run the stack in this folder and keep it "
                                       "(logs in DIR/logs); default: a temporary one, removed after"),
          as_json: bool = typer.Option(False, "--json", help="print only the JSON object")) -> None:
    """The whole stack (gpuledger up --demo) under faults: kill -9 of each service and of
    nats-server mid-burst, resubmits and hostile input; an independent fold of the log counts
    lost, duplicated, double_booked, bound_void, stalled and recovery_s per fault
    (docs/reliability.md)."""
    import asyncio

    from bench.chaos.run import Options, run_chaos

    if victim not in ("leader", "follower"):
        raise typer.BadParameter(f"{victim!r}: expected leader or follower", param_hint="--cluster-victim")
    faults = [k.strip() for k in kills.split(",") if k.strip()]
    unknown = sorted(set(faults) - set(SERVICE_ROLES))
    if unknown:
        raise typer.BadParameter(f"{', '.join(unknown)}: not a service; one of {', '.join(SERVICE_ROLES)}",
                                 param_hint="--kill")
    faults += (["nats-3s"] if nats_outage else []) + (["nats-60s"] if long_outage else [])
    options = Options(claims=claims, rate=rate, nodes=nodes, hold_s=hold_ms / 1000, faults=tuple(faults),
                      cluster=cluster, victim=victim, resubmit_share=resubmit, conflicting=conflicting, fuzz=fuzz, forge=forge, drain_s=drain_s,
                      data_dir=data_dir)
    say = (lambda _line: None) if as_json else (lambda line: typer.echo(line, err=True))
    _emit(asyncio.run(run_chaos(options, say)), as_json)


SERVICE_ROLES = ("claim", "allocator", "quota", "pool-controller", "projector", "node-agents")


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
