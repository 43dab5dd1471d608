"""Variants of a trace, to check that a policy generalises beyond one workload mix.

`python -m simulator.variants OUT_DIR [--pods PODS.csv --nodes NODES.csv] [--seed N]` writes pod
lists with more sharing pods, more multi-GPU pods, 10/30/50 % of the GPU pods bound to GPU models
(`gpu_spec` lists, models drawn in proportion to the fleet), 8, 15 or 30 % bound to the fleet's
rarest models, which hold about 10 % of its GPUs (`model-scarce-8/15/30`: at 15 and 30 more is
asked of them than they hold, at 8 a little less) and more CPU-only pods (the
protocol then tops up or cuts each to 130 % of capacity as usual). Every variant is a pure
function of the trace and the seed.

It also writes the family the FGD repository publishes beside its default list (`data/` of
hkust-adsl/kubernetes-scheduler-simulator), each made from the default list by varying one
proportion, under the names of the published files' suffixes (`simulator.family`).
"""

from __future__ import annotations

import argparse
import csv
import random
from dataclasses import replace
from pathlib import Path

from simulator.family import family
from simulator.trace import DEFAULT_NODES, DEFAULT_PODS, POD_COLUMNS, NodeRow, PodRow, read_trace

MODEL_BOUND_PERCENTS = (10, 30, 50)
MODEL_SCARCE_PERCENTS = (8, 15, 30)
SCARCE_SHARE = 0.10  # the rarest models a scarce-bound pod allows hold about this share of its GPUs
LIST_LENGTHS = ((1, 0.5), (2, 0.3), (3, 0.2))  # how many models a bound pod allows, and how often
VARIANT_SEED = 7


def _more(pods: list[PodRow], wanted, times: int, rng: random.Random) -> list[PodRow]:
    """Each pod that `wanted` selects appears `times` times (copies get new names)."""
    out = list(pods)
    for pod in pods:
        if wanted(pod):
            out += [replace(pod, name=f"{pod.name}-v{j}") for j in range(1, times)]
    rng.shuffle(out)
    return out


def _gpus_by_model(nodes: tuple[NodeRow, ...], pod: PodRow) -> dict[str, int]:
    """GPUs of each model on nodes that could hold the pod alone (cards, CPU and memory)."""
    gpus: dict[str, int] = {}
    for n in nodes:
        if n.gpus >= pod.num_gpu and n.cpu_milli >= pod.cpu_milli and n.memory_mib >= pod.memory_mib:
            gpus[n.model] = gpus.get(n.model, 0) + n.gpus
    return gpus


def _draw_models(gpus: dict[str, int], rng: random.Random) -> tuple[str, ...]:
    """1 to 3 distinct models (as `LIST_LENGTHS` says), each drawn in proportion to its GPUs."""
    length = rng.choices([n for n, _ in LIST_LENGTHS], [w for _, w in LIST_LENGTHS])[0]
    pool, chosen = dict(gpus), []
    while pool and len(chosen) < length:
        model = rng.choices(sorted(pool), [pool[m] for m in sorted(pool)])[0]
        chosen.append(model)
        del pool[model]
    return tuple(chosen)


def model_bound(pods: list[PodRow], nodes: tuple[NodeRow, ...], percent: int,
                rng: random.Random) -> list[PodRow]:
    """`percent` % of the GPU pods (drawn at random) get a `gpu_spec` list of 1 to 3 models, each
    model drawn in proportion to the fleet's GPUs among the models with a node big enough for the
    pod (so every bound pod still fits an empty cluster). Names and everything else stay."""
    return _bind(pods, nodes, percent, rng, _draw_models)


def _bind(pods: list[PodRow], nodes: tuple[NodeRow, ...], percent: int, rng: random.Random,
          choose) -> list[PodRow]:
    """`percent` % of the GPU pods (drawn at random) bound to `choose(gpus_by_model, rng)`, where
    `gpus_by_model` counts the GPUs of the models with a node big enough for the pod."""
    gpu_pods = [i for i, p in enumerate(pods) if p.num_gpu]
    bound = set(rng.sample(gpu_pods, round(len(gpu_pods) * percent / 100)))
    out = []
    for i, pod in enumerate(pods):
        gpus = _gpus_by_model(nodes, pod) if i in bound else {}
        out.append(replace(pod, models=choose(gpus, rng)) if gpus else pod)
    return out


def scarce_models(gpus: dict[str, int]) -> tuple[str, ...]:
    """The rarest models (fewest GPUs first, ties by name) until they hold `SCARCE_SHARE` of the
    GPUs in `gpus`: what users who want "the good cards" bind to, few and wanted."""
    total, held, chosen = sum(gpus.values()), 0, []
    for model in sorted(gpus, key=lambda m: (gpus[m], m)):
        if chosen and held >= SCARCE_SHARE * total:
            break
        chosen.append(model)
        held += gpus[model]
    return tuple(chosen)


def model_scarce(pods: list[PodRow], nodes: tuple[NodeRow, ...], percent: int,
                 rng: random.Random) -> list[PodRow]:
    """`percent` % of the GPU pods (drawn at random) bound to the rarest models with a node big
    enough for the pod (`scarce_models`): with `percent` above `SCARCE_SHARE` x 100 they ask more of
    those models than the fleet has, the case where a policy must keep them for the pods bound to
    them. (model-bound-N draws models in proportion to the fleet: no model is ever scarce there.)"""
    return _bind(pods, nodes, percent, rng, lambda gpus, _rng: scarce_models(gpus))


def variants(pods: list[PodRow], nodes: tuple[NodeRow, ...], seed: int = VARIANT_SEED) -> dict[str, list[PodRow]]:
    """Every variant by name; each from its own generator, so one does not move another."""
    def rng(name: str) -> random.Random:
        return random.Random(f"{seed}/{name}")
    out = {
        "share-heavy": _more(pods, lambda p: p.num_gpu == 1 and p.gpu_milli < 1000, 3, rng("share-heavy")),
        "multi-gpu-heavy": _more(pods, lambda p: p.num_gpu > 1, 6, rng("multi-gpu-heavy")),
    }
    for percent in MODEL_BOUND_PERCENTS:
        name = f"model-bound-{percent}"
        out[name] = model_bound(pods, nodes, percent, rng(name))
    for percent in MODEL_SCARCE_PERCENTS:
        name = f"model-scarce-{percent}"
        out[name] = model_scarce(pods, nodes, percent, rng(name))
    out["cpu-only-heavy"] = _more(pods, lambda p: p.num_gpu == 0, 4, rng("cpu-only-heavy"))
    out.update(family(pods, nodes, rng, model_bound))
    return out


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
    parser.add_argument("--seed", type=int, default=VARIANT_SEED, help="the variants' seed")
    args = parser.parse_args()
    trace = read_trace(args.nodes, args.pods)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, pods in variants(list(trace.pods), trace.nodes, args.seed).items():
        write_pods(args.out / f"pods_{name}.csv", pods)
        print(args.out / f"pods_{name}.csv", len(pods))


if __name__ == "__main__":
    main()
