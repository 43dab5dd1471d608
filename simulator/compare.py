"""A policy against a baseline, seed by seed, over a trace and its variants (one-pass protocol).

Both policies see the same workload and node order for a seed (the protocol draws them from the
seed alone), so the paired difference per seed is the policy's own effect; its mean and how many
seeds the policy wins say more than two means whose seed-to-seed spread overlaps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from simulator.metrics import mean_sd, unallocated
from simulator.runner import run_jobs
from simulator.trace import Trace
from simulator.variants import variants

KPI_LEVELS = (100, 130)
DEFAULT_VARIANT = "default"


@dataclass
class Comparison:
    """Unallocated GPU % at 100 and 130 % arrived, per variant, policy and seed."""

    policy: str
    baseline: str
    seeds: list[int]
    unalloc: dict[str, dict[str, dict[int, dict[int, float]]]] = field(default_factory=dict)
    ms_per_decision: dict[str, dict[str, float]] = field(default_factory=dict)  # variant -> policy -> ms

    def paired(self, variant: str, level: int) -> dict:
        """policy - baseline per seed (negative: the policy leaves less unallocated)."""
        runs = self.unalloc[variant]
        diffs = [runs[self.policy][s][level] - runs[self.baseline][s][level] for s in self.seeds]
        return {**mean_sd(diffs), "wins": sum(d < 0 for d in diffs), "ties": sum(d == 0 for d in diffs)}

    def to_json(self) -> dict:
        out = {}
        for variant, runs in self.unalloc.items():
            out[variant] = {
                "per_seed": {str(s): {p: {str(x): runs[p][s][x] for x in KPI_LEVELS} for p in runs}
                             for s in self.seeds},
                "summary": {p: {f"unalloc_{x}": mean_sd([runs[p][s][x] for s in self.seeds])
                                for x in KPI_LEVELS} for p in runs},
                "paired": {f"unalloc_{x}": self.paired(variant, x) for x in KPI_LEVELS},
                "ms_per_decision": self.ms_per_decision[variant],
            }
        return _no_nan({"policy": self.policy, "baseline": self.baseline, "seeds": self.seeds, "variants": out})


def variant_traces(trace: Trace, names: list[str], seed: int) -> dict[str, Trace]:
    """The trace itself as `default` and the named variants of `simulator.variants`."""
    made = variants(list(trace.pods), trace.nodes, seed)
    unknown = [n for n in names if n != DEFAULT_VARIANT and n not in made]
    if unknown:
        raise ValueError(f"--variant: unknown {', '.join(unknown)}; known: "
                         f"{', '.join([DEFAULT_VARIANT, *made])}")
    return {n: trace if n == DEFAULT_VARIANT else replace(trace, pods=tuple(made[n])) for n in names}


def variant_names(seed: int = 0) -> list[str]:
    """Every variant name, the trace itself first."""
    return [DEFAULT_VARIANT, *variants([], (), seed)]


def compare(traces: dict[str, Trace], policy: str, baseline: str, seeds: list[int],
            workers: int = 1, progress=None) -> Comparison:
    jobs = [(v, p, s) for v in traces for p in (baseline, policy) for s in seeds]
    results = run_jobs(traces, jobs, workers, progress)
    out = Comparison(policy, baseline, list(seeds))
    for variant in traces:
        out.unalloc[variant], out.ms_per_decision[variant] = {}, {}
        for p in (baseline, policy):
            runs = [results[(variant, p, s)] for s in seeds]
            out.unalloc[variant][p] = {r.seed: _kpis(r) for r in runs}
            decisions = sum(r.decisions for r in runs)
            out.ms_per_decision[variant][p] = 1000 * sum(r.decide_seconds for r in runs) / max(decisions, 1)
    return out


def _kpis(result) -> dict[int, float]:
    curve = unallocated(result.arrived, result.allocated, result.capacity)
    return {x: curve.get(x, float("nan")) for x in KPI_LEVELS}


def table(c: Comparison) -> str:
    """One row per variant: both means, the paired difference and the seeds won, at 100 and 130 %."""
    lines = [f"| variant | {c.baseline} U(100) | {c.policy} U(100) | paired (wins) "
             f"| {c.baseline} U(130) | {c.policy} U(130) | paired (wins) | ms/decision {c.baseline} / {c.policy} |",
             "| --- " * 8 + "|"]
    for variant, runs in c.unalloc.items():
        cells = []
        for x in KPI_LEVELS:
            for p in (c.baseline, c.policy):
                cells.append(_ms(mean_sd([runs[p][s][x] for s in c.seeds])))
            d = c.paired(variant, x)
            cells.append(f"{d['mean']:+.2f} ({d['wins']}/{len(c.seeds)})" if d["n"] else "-")
        ms = c.ms_per_decision[variant]
        lines.append(f"| {variant} | " + " | ".join(cells) + f" | {ms[c.baseline]:.2f} / {ms[c.policy]:.2f} |")
    return "\n".join(lines)


def per_seed(c: Comparison) -> str:
    """Every seed's U(100) and U(130) of both policies, per variant."""
    lines = [f"| variant | seed | {c.baseline} U(100) | {c.policy} U(100) | {c.baseline} U(130) "
             f"| {c.policy} U(130) |", "| --- " * 6 + "|"]
    for variant, runs in c.unalloc.items():
        for s in c.seeds:
            cells = [_cell(runs[p][s][x]) for x in KPI_LEVELS for p in (c.baseline, c.policy)]
            lines.append(f"| {variant} | {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def _no_nan(value):
    """NaN (a level a small trace never reaches) as null: JSON readers in other languages refuse NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    return value


def _ms(v: dict) -> str:
    return "-" if not v.get("n") else f"{v['mean']:.2f} ± {v['sd']:.2f}"
