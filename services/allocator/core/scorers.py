"""Scoring policies: each says how much it likes a node for a need (higher wins).

A policy is a small object with `pick(view, need, ctx)` (which units inside the node, or None
if it does not fit) and `score(view, need, picks, ctx)`. Policies are registered by name; the
simulator runs the very same objects (`gpuledger simulate --policy NAME`).
"""

from __future__ import annotations

from services.allocator.core.demand import Need
from services.allocator.core.placement import PlacementContext, default_pick
from services.allocator.core.state import FREE, NodeView

CPU_SCALE = 128_000  # the openb paper's normalisation constants (128 cores, 8 GPUs)
GPU_SCALE = 8 * FREE


class BinPack:
    """Fill the fullest node that fits (after placing, least GPU and CPU left)."""

    name = "binpack"
    normalize = False

    def pick(self, view: NodeView, need: Need, ctx: PlacementContext):
        return default_pick(view, need)

    def score(self, view: NodeView, need: Need, picks, ctx: PlacementContext) -> float:
        gpu_left = view.gpu_milli_free - need.count * need.milli
        cpu_left = view.cpu_free - need.cpu
        return 100 * (1 - (0.5 * cpu_left / CPU_SCALE + 0.5 * gpu_left / GPU_SCALE))


class Spread:
    """The emptiest node first (a pool's `Spread` strategy)."""

    name = "spread"
    normalize = False

    def pick(self, view: NodeView, need: Need, ctx: PlacementContext):
        return default_pick(view, need)

    def score(self, view: NodeView, need: Need, picks, ctx: PlacementContext) -> float:
        return view.gpu_milli_free / GPU_SCALE * 50 + view.cpu_free / CPU_SCALE * 50


POLICIES: dict[str, object] = {}


def register(policy) -> None:
    POLICIES[policy.name] = policy


def get_policy(name: str):
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown placement policy {name!r}; known: {', '.join(sorted(POLICIES))}")


register(BinPack())
register(Spread())
DEFAULT_POLICY = "binpack"
