"""Run policies over seeds (in worker processes when asked) and summarise them."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from simulator.cluster import trace_shapes
from simulator.metrics import level_means, mean_sd, unallocated
from simulator.onepass import PassResult, run_pass
from simulator.protocol import workload
from simulator.trace import DEFAULT_NODES, DEFAULT_PODS, OPENB, REPO, Trace, read_trace  # noqa: F401 (re-exported)

BASELINES = ("random", "dotprod", "gpu-packing", "gpu-clustering", "bestfit", "fgd")
ALL_POLICIES = BASELINES + ("gpuledger",)
LEVELS = (50, 80, 90, 95, 100, 110, 120, 130)
PUBLISHED = {  # the paper's simulator, default trace, mean +- sd over 10 seeds (README beside the CSVs)
    "fgd": ((4.77, 0.11), (4.61, 0.08)),
    "bestfit": ((7.14, 0.14), (6.92, 0.13)),
    "gpu-packing": ((8.22, 0.53), (8.00, 0.55)),
    "gpu-clustering": ((8.35, 0.61), (8.12, 0.63)),
    "dotprod": ((9.38, 0.19), (9.15, 0.20)),
    "random": ((13.70, 0.33), (12.53, 0.32)),
}


@dataclass
class Summary:
    """One policy over its seeds."""

    policy: str
    seeds: list[int]
    unalloc: dict[int, dict] = field(default_factory=dict)  # level -> mean/sd over seeds
    frag: dict[int, dict] = field(default_factory=dict)  # level -> mean/sd (% of all GPUs)
    curve: dict[int, float] = field(default_factory=dict)  # level -> mean allocated % (for the plot)
    failed: dict[str, float] = field(default_factory=dict)  # shape -> mean pods dropped per seed
    ms_per_decision: float = 0.0
    decisions: int = 0

    def to_json(self, on_published_trace: bool = True) -> dict:
        published = PUBLISHED.get(self.policy) if on_published_trace else None
        return {
            "seeds": self.seeds,
            "unalloc_100": self.unalloc.get(100), "unalloc_130": self.unalloc.get(130),
            "unalloc_by_level": {str(x): v for x, v in sorted(self.unalloc.items()) if x in LEVELS},
            "frag_by_level": {str(x): v for x, v in sorted(self.frag.items()) if x in LEVELS},
            "failed_pods_by_shape": self.failed,
            "ms_per_decision": round(self.ms_per_decision, 4), "decisions": self.decisions,
            "published": ({"unalloc_100": {"mean": published[0][0], "sd": published[0][1]},
                           "unalloc_130": {"mean": published[1][0], "sd": published[1][1]}}
                          if published else None),
        }


def summarise(policy: str, results: list[PassResult]) -> Summary:
    summary = Summary(policy, [r.seed for r in results])
    per_seed_u = [unallocated(r.arrived, r.allocated, r.capacity) for r in results]
    per_seed_f = [level_means(r.arrived, r.fragmentation, r.capacity) for r in results]
    levels = sorted(set().union(*per_seed_u))
    for x in levels:
        summary.unalloc[x] = mean_sd([u.get(x, float("nan")) for u in per_seed_u])
        summary.frag[x] = mean_sd([f.get(x, float("nan")) for f in per_seed_f])
        summary.curve[x] = 100 - summary.unalloc[x]["mean"]
    shapes = sorted(set().union(*(r.failed for r in results)))
    summary.failed = {s: sum(r.failed.get(s, 0) for r in results) / len(results) for s in shapes}
    summary.decisions = sum(r.decisions for r in results)
    seconds = sum(r.decide_seconds for r in results)
    summary.ms_per_decision = 1000 * seconds / max(summary.decisions, 1)
    return summary


def is_published_trace(nodes_path: str | Path, pods_path: str | Path) -> bool:
    """The published figures were measured on the default node and pod lists only: beside any
    other trace they would read as a comparison that was never made."""
    return Path(nodes_path).name == DEFAULT_NODES.name and Path(pods_path).name == DEFAULT_PODS.name


_TRACES: dict[str, Trace] = {}  # in each worker: the traces its jobs name


def _init(traces: dict[str, Trace]) -> None:
    global _TRACES
    _TRACES = traces


def _one(job: tuple[str, str, int]) -> PassResult:
    key, policy, seed = job
    trace = _TRACES[key]
    return run_pass(workload(trace, seed), policy, trace_shapes(trace.pods))


def run_jobs(traces: dict[str, Trace], jobs: list[tuple[str, str, int]], workers: int = 1,
             progress=None) -> dict[tuple[str, str, int], PassResult]:
    """One one-pass fill per (trace name, policy, seed); `workers` > 1 runs them in that many
    processes (each gets the traces once)."""
    results: dict[tuple[str, str, int], PassResult] = {}
    if workers <= 1:
        _init(traces)
        for job in jobs:
            results[job] = _one(job)
            if progress:
                progress(job)
        return results
    with ProcessPoolExecutor(workers, initializer=_init, initargs=(traces,)) as pool:
        for job, result in zip(jobs, pool.map(_one, jobs)):
            results[job] = result
            if progress:
                progress(job)
    return results


def run_all(nodes: str | Path, pods: str | Path, policies: list[str], seeds: list[int],
            workers: int = 1, progress=None) -> list[Summary]:
    """Every (policy, seed) pass; `workers` > 1 runs them in that many processes."""
    jobs = [("", p, s) for p in policies for s in seeds]
    results = run_jobs({"": read_trace(nodes, pods)}, jobs, workers,
                       progress and (lambda job: progress(job[1:])))
    return [summarise(p, [results[("", p, s)] for s in seeds]) for p in policies]
