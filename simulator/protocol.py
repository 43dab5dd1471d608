"""The published one-pass protocol (FGD paper's simulator): per-seed workload and node order.

1. sort pods by name, shuffle; 2. top up to 130 % of GPU capacity by drawing pods with
replacement (or cut random pods while over it); 3. one random node permutation, which breaks
ties between equally scored nodes. All randomness comes from `random.Random(seed)`, in this order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from simulator.trace import NodeRow, PodRow, Trace

TARGET = 1.3  # arrived GPU demand the workload is filled (or cut) to, as a share of capacity


@dataclass(frozen=True)
class Workload:
    seed: int
    pods: tuple[PodRow, ...]  # in arrival order
    nodes: tuple[NodeRow, ...]  # in tie-break order (registration order = rank)
    capacity: int  # milli-GPU of the whole cluster


def top_up(pods: list[PodRow], target: int, rng: random.Random) -> list[PodRow]:
    """Append copies of uniformly drawn pods until the next draw would pass `target` milli."""
    originals, total, copies = list(pods), sum(p.gpu_demand for p in pods), 0
    while True:
        pod = rng.choice(originals)
        if total + pod.gpu_demand > target:
            return pods
        copies += 1
        pods.append(replace(pod, name=f"{pod.name}-copy{copies}"))
        total += pod.gpu_demand


def cut(pods: list[PodRow], target: int, rng: random.Random) -> list[PodRow]:
    """Remove uniformly random pods until the total demand no longer passes `target` milli."""
    total = sum(p.gpu_demand for p in pods)
    while total > target and pods:
        total -= pods.pop(rng.randrange(len(pods))).gpu_demand
    return pods


def workload(trace: Trace, seed: int, target: float = TARGET) -> Workload:
    rng = random.Random(seed)
    pods = sorted(trace.pods, key=lambda p: p.name)
    rng.shuffle(pods)
    goal = int(target * trace.capacity)
    total = sum(p.gpu_demand for p in pods)
    pods = cut(pods, goal, rng) if total > goal else top_up(pods, goal, rng)
    nodes = list(trace.nodes)
    rng.shuffle(nodes)
    return Workload(seed, tuple(pods), tuple(nodes), trace.capacity)


def parse_seeds(text: str) -> list[int]:
    """'42-51' or '1,5,9' or '42-44,50' -> seeds; a clear error otherwise."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        try:
            if dash:
                first, last = int(low), int(high)
                if last < first:
                    raise ValueError
                seeds.extend(range(first, last + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise ValueError(f"--seeds: {part!r} is not a seed or a range like 42-51") from None
    if not seeds:
        raise ValueError("--seeds: no seeds given")
    return list(dict.fromkeys(seeds))
