"""The published baselines of the FGD paper (random, dotprod, gpu-packing, gpu-clustering, bestfit)
and plain binpack and spread, as the paper's simulator computes them, integer scores included:
integer truncation decides ties, and ties decide results. Registered in scorers.py."""

from __future__ import annotations


from services.allocator.core.demand import Need
from services.allocator.core.picks import default_pick, fitting_units
from services.allocator.core.policy import PlacementContext, PolicyBase
from ledger.state import FREE, NodeView


CPU_SCALE = 128_000  # the openb paper's normalisation constants (128 cores, 8 GPUs)
GPU_SCALE = 8 * FREE


class BinPack(PolicyBase):
    """Fill the fullest node that fits (after placing, least GPU and CPU left)."""

    name = "binpack"
    cacheable = True

    def pick(self, view: NodeView, need: Need, ctx: PlacementContext):
        return default_pick(view, need)

    def score(self, view: NodeView, need: Need, picks, ctx: PlacementContext) -> float:
        gpu_left = view.gpu_milli_free - need.count * need.milli
        cpu_left = view.cpu_free - need.cpu
        return 100 * (1 - (0.5 * cpu_left / CPU_SCALE + 0.5 * gpu_left / GPU_SCALE))


class Spread(PolicyBase):
    """The emptiest node first (a pool's `Spread` strategy)."""

    name = "spread"
    cacheable = True

    def pick(self, view: NodeView, need: Need, ctx: PlacementContext):
        return default_pick(view, need)

    def score(self, view: NodeView, need: Need, picks, ctx: PlacementContext) -> float:
        return view.gpu_milli_free / GPU_SCALE * 50 + view.cpu_free / CPU_SCALE * 50


# --- the published baselines (FGD paper, ATC'23) ------------------------------------------------


def _requested(need: Need) -> int:
    return need.count * need.milli


class BestFit(BinPack):
    """Least CPU and GPU left after placing, as an integer, min-max normalised over feasible nodes."""

    name = "bestfit"
    normalize = True

    def score(self, view: NodeView, need: Need, picks, ctx: PlacementContext) -> int:
        s = 0.5 * float(view.cpu_free - need.cpu) / CPU_SCALE
        s += 0.5 * float(view.gpu_milli_free - _requested(need)) / GPU_SCALE
        return int((1 - s) * 100)


class DotProd(BinPack):
    """The smallest dot product of the node's free (CPU, GPU) and the pod's request."""

    name = "dotprod"

    def score(self, view: NodeView, need: Need, picks, ctx: PlacementContext) -> int:
        dot = (view.cpu_free / CPU_SCALE) * (need.cpu / CPU_SCALE)
        dot += (view.gpu_milli_free / GPU_SCALE) * (_requested(need) / GPU_SCALE)
        return int(100 * (1 - dot / 2))


def _gpu_units(view: NodeView) -> list:
    return [u for u in view.units if u.healthy and not u.mig_profile]


class GpuPacking(BinPack):
    """Shared GPUs first, then free GPUs of used nodes, then whole free nodes (small first)."""

    name = "gpu-packing"

    def score(self, view: NodeView, need: Need, picks, ctx: PlacementContext) -> int:
        if need.count == 0:
            return 0
        units = _gpu_units(view)
        if all(u.is_free for u in units):
            return 33 - len(units)
        if all(not view.units[i].is_free for i in picks):  # lands on already shared GPUs only
            return max(50, 100 - sum(u.milli_free for u in units) // 100)
        return max(33, 50 - sum(1 for i in picks if view.units[i].is_free))


def _gpu_tags(view: NodeView) -> set[str]:
    """Which kinds of GPU pods a node holds: a unit with one holder and nothing left is a whole
    card's (k-gpu); any other held unit is shared (sharing pods ask for less than a card)."""
    tags = set()
    for u in view.units:
        if u.holders:
            tags.add("k-gpu" if u.holders == 1 and u.milli_free == 0 else "share-gpu")
    return tags


class GpuClustering(BinPack):
    """Keep sharing pods with sharing pods and whole-GPU pods with whole-GPU pods."""

    name = "gpu-clustering"

    def score(self, view: NodeView, need: Need, picks, ctx: PlacementContext) -> int:
        if need.count == 0:
            return 0
        base = 25 * (GPU_SCALE - view.gpu_milli_free) // GPU_SCALE
        tag = "share-gpu" if need.milli < FREE else "k-gpu"
        tags = _gpu_tags(view)
        if not tags:
            return base + 25
        if tags == {tag}:
            return base + 75
        return base + 50 if tag in tags else base


class Random(PolicyBase):
    """One feasible node uniformly at random, and a random fitting card in it (the worst case)."""

    name = "random"
    cacheable = True  # feasibility and picks are pure; the draw happens in score_group/refine

    def pick(self, view: NodeView, need: Need, ctx: PlacementContext):
        return default_pick(view, need)

    def score(self, view: NodeView, need: Need, picks, ctx: PlacementContext) -> float:
        return 0.0

    def score_group(self, view: NodeView, need: Need, picks, ctx: PlacementContext, nodes: int) -> float:
        # the largest of `nodes` uniform draws: the group wins in proportion to its node count
        return ctx.rng.random() ** (1 / nodes)

    def refine(self, view: NodeView, need: Need, picks, ctx: PlacementContext):
        if need.count != 1 or need.milli >= FREE:
            return picks
        return (ctx.rng.choice(fitting_units(view, need)),)
