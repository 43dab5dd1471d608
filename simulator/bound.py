"""How low Unallocated GPU % at 100 % arrived can go: the card room the sharing pods waste.

At the level-100 events arrived ≈ capacity, so what is unallocated is what failed, and it is at
least the room left on the cards the placed shares use: `capacity = placed + idle` and
`arrived = placed + failed`. Packing the shares that arrived by then into cards with full knowledge
(no CPU, memory or node limits, any order) bounds that room from below. Two figures per seed:

- best-fit decreasing (`bfd_waste_pct`): a good offline packing, pure Python;
- the Gilmore-Gomory LP bound (`lp_waste_pct`): no packing of these shares wastes less. It needs
  scipy, which is not a dependency of the project: without it the figure is left out.

`python -m simulator.bound [--seeds 42-51] [--nodes NODES.csv] [--pods PODS.csv]`
"""

from __future__ import annotations

import argparse
import math
from collections import Counter

from simulator.protocol import parse_seeds, workload
from simulator.trace import DEFAULT_NODES, DEFAULT_PODS, MILLI, Trace, read_trace  # no msgspec: runs anywhere


def shares_by_100(trace: Trace, seed: int) -> Counter:
    """gpu_milli -> count of the one-card shares among the pods arrived before 100 % (protocol order)."""
    work, arrived, shares = workload(trace, seed), 0, Counter()
    for pod in work.pods:
        if arrived >= work.capacity:
            break
        if pod.num_gpu == 1 and pod.gpu_milli < MILLI:
            shares[pod.gpu_milli] += 1
        arrived += pod.gpu_demand
    return shares


def best_fit_decreasing(shares: Counter) -> list[int]:
    """The room left on each card when the shares go, largest first, to the fullest card they fit."""
    rooms: list[int] = []
    for size in sorted(shares.elements(), reverse=True):
        fitting = [i for i, room in enumerate(rooms) if room >= size]
        if fitting:
            best = min(fitting, key=rooms.__getitem__)
            rooms[best] -= size
        else:
            rooms.append(MILLI - size)
    return rooms


def lp_cards(shares: Counter, rounds: int = 500) -> float | None:
    """The LP relaxation of the fewest cards (column generation over card patterns); None
    without scipy."""
    try:
        import numpy as np
        from scipy.optimize import linprog
    except ImportError:
        return None
    sizes = sorted(shares, reverse=True)
    demand = np.array([shares[s] for s in sizes], float)
    patterns = [np.eye(len(sizes))[i] * (MILLI // s) for i, s in enumerate(sizes)]
    for _ in range(rounds):
        a = np.array(patterns).T
        res = linprog(np.ones(a.shape[1]), A_ub=-a, b_ub=-demand, bounds=(0, None), method="highs")
        value, pattern = _best_pattern(sizes, -res.ineqlin.marginals, demand)
        if value <= 1 + 1e-9:
            return float(res.fun)
        patterns.append(np.array(pattern, float))
    return float(res.fun)


def _best_pattern(sizes: list[int], duals, demand) -> tuple[float, list[int]]:
    """The card pattern of most dual value (a bounded knapsack over milli in steps of gcd)."""
    step = math.gcd(*sizes, MILLI)
    cap = MILLI // step
    best = [0.0] * (cap + 1)
    chosen = [[0] * len(sizes) for _ in range(cap + 1)]
    for i, size in enumerate(sizes):
        weight = size // step
        for _ in range(min(int(demand[i]), cap // weight)):
            for c in range(cap, weight - 1, -1):
                if best[c - weight] + duals[i] > best[c] + 1e-12:
                    best[c] = best[c - weight] + duals[i]
                    chosen[c] = chosen[c - weight][:]
                    chosen[c][i] += 1
    top = max(range(cap + 1), key=best.__getitem__)
    return best[top], chosen[top]


def bound(trace: Trace, seed: int) -> dict:
    shares = shares_by_100(trace, seed)
    total = sum(size * n for size, n in shares.items())
    bfd = sum(best_fit_decreasing(shares))
    lp = lp_cards(shares)
    out = {"seed": seed, "shares": sum(shares.values()), "bfd_waste_pct": 100 * bfd / trace.capacity}
    if lp is not None:
        out["lp_waste_pct"] = 100 * (math.ceil(lp - 1e-9) * MILLI - total) / trace.capacity
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--nodes", default=DEFAULT_NODES)
    parser.add_argument("--pods", default=DEFAULT_PODS)
    args = parser.parse_args()
    trace = read_trace(args.nodes, args.pods)
    for seed in parse_seeds(args.seeds):
        row = bound(trace, seed)
        lp = f"{row['lp_waste_pct']:.2f}" if "lp_waste_pct" in row else "- (needs scipy)"
        print(f"seed {seed}: {row['shares']} shares by 100 %; best-fit decreasing wastes "
              f"{row['bfd_waste_pct']:.2f} % of capacity; LP bound {lp}")


if __name__ == "__main__":
    main()
