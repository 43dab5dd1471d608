"""Scoring policies: each says how much it likes a node for a need (higher wins).

A policy (the `Policy` Protocol in policy.py names its members and optional hooks) is a small
object with `pick(view, need, ctx)` (which units inside the node, or None if it does not fit) and
`score(view, need, picks, ctx)`. Policies are registered by name; the simulator runs the very same
objects (`gpuledger simulate --policy NAME`).

`cacheable = True` says the score is a pure function of (view, need, the context's typical shapes
and the claim's rule arguments), so placement may memoise it per node view. The published baselines of the FGD paper
(random, dotprod, gpu-packing, gpu-clustering, bestfit, fgd) are here as the paper's simulator
computes them, integer scores included: integer truncation decides ties, and ties decide results.
"""

from __future__ import annotations

from services.allocator.core.baselines import (BestFit, BinPack, DotProd, GpuClustering, GpuPacking,
                                                Random, Spread)
from services.allocator.core.fgd import (FGD, STRAND_CARDS, GpuLedger, cpu_stranded,  # noqa: F401
                                          gpu_pods_cpu_per_milli)
from services.allocator.core.policy import Policy, missing_members

POLICIES: dict[str, Policy] = {}


def register(policy: Policy) -> None:
    """Make a policy available by its name; one that lacks a member of `Policy` is refused."""
    missing = missing_members(policy)
    if missing:
        raise TypeError(f"{type(policy).__name__} is not a placement Policy: it lacks "
                        f"{', '.join(missing)} (subclass PolicyBase for the optional hooks' defaults)")
    POLICIES[policy.name] = policy


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown placement policy {name!r}; known: {', '.join(sorted(POLICIES))}")


for _policy in (BinPack(), Spread(), BestFit(), DotProd(), GpuPacking(), GpuClustering(), FGD(),
                Random(), GpuLedger()):
    register(_policy)
DEFAULT_POLICY = "gpuledger"
