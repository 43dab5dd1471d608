"""Variants of a trace, to check that a policy generalises beyond one workload mix.

`python -m simulator.variants OUT_DIR [--pods PODS.csv --nodes NODES.csv]` writes pod lists with
more sharing pods, more multi-GPU pods, more model-constrained pods and more CPU-only pods (the
protocol then tops up or cuts each to 130 % of capacity as usual).
"""

from __future__ import annotations

import argparse
import csv
import random
from dataclasses import replace
from pathlib import Path

from simulator.runner import DEFAULT_NODES, DEFAULT_PODS
from simulator.trace import POD_COLUMNS, NodeRow, PodRow, read_trace


def _more(pods: list[PodRow], wanted, times: int, rng: random.Random) -> list[PodRow]:
    """Each pod that `wanted` selects appears `times` times (copies get new names)."""
    out = list(pods)
    for pod in pods:
        if wanted(pod):
            out += [replace(pod, name=f"{pod.name}-v{j}") for j in range(1, times)]
    rng.shuffle(out)
    return out


def _constrained(pods: list[PodRow], nodes: tuple[NodeRow, ...], share: float,
                 rng: random.Random) -> list[PodRow]:
    """`share` of GPU pods may run on one model only, drawn in proportion to the fleet's GPUs
    among the models with a node big enough for the pod."""
    def constrain(p: PodRow) -> PodRow:
        models = [n.model for n in nodes for _ in range(n.gpus)
                  if n.gpus >= p.num_gpu and n.cpu_milli >= p.cpu_milli]
        return replace(p, models=(rng.choice(models),)) if models else p
    return [constrain(p) if p.num_gpu and rng.random() < share else p for p in pods]


def variants(pods: list[PodRow], nodes: tuple[NodeRow, ...], seed: int = 7) -> dict[str, list[PodRow]]:
    rng = random.Random(seed)
    return {
        "share-heavy": _more(pods, lambda p: p.num_gpu == 1 and p.gpu_milli < 1000, 3, rng),
        "multi-gpu-heavy": _more(pods, lambda p: p.num_gpu > 1, 6, rng),
        "model-constrained": _constrained(pods, nodes, 0.4, rng),
        "cpu-only-heavy": _more(pods, lambda p: p.num_gpu == 0, 4, rng),
    }


def write_pods(path: Path, pods: list[PodRow]) -> None:
    """The pods in the openb format; times only when every pod has them (a pod list without
    times stays one: the one-pass fill does not use them)."""
    timed = all(p.creation_time is not None for p in pods)
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle, lineterminator="\n")
        out.writerow(POD_COLUMNS if timed else POD_COLUMNS[:6])
        for p in pods:
            row = [p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, "|".join(p.models)]
            if timed:
                row += ["LS", "Running", p.creation_time,
                        "" if p.deletion_time is None else p.deletion_time, p.creation_time]
            out.writerow(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES)
    parser.add_argument("--pods", type=Path, default=DEFAULT_PODS)
    args = parser.parse_args()
    trace = read_trace(args.nodes, args.pods)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, pods in variants(list(trace.pods), trace.nodes).items():
        write_pods(args.out / f"pods_{name}.csv", pods)
        print(args.out / f"pods_{name}.csv", len(pods))


if __name__ == "__main__":
    main()
