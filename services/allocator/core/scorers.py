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

import math

from services.allocator.core.demand import Need
from services.allocator.core.fragmentation import max_shape_cpu, stats_after, stats_total, view_fragmentation
from services.allocator.core.picks import default_pick, fitting_units
from services.allocator.core.policy import PlacementContext, Policy, PolicyBase, missing_members
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


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def frag_drop(view: NodeView, need: Need, picks, ctx: PlacementContext) -> float:
    """How much the node's fragmentation falls (milli) if the need takes `picks` there."""
    card, stats, before, groups = view_fragmentation(view, ctx.typical_shapes)
    takes = [(card.lefts[i], card.models[i], need.milli) for i in picks]
    return before - stats_total(stats_after(stats, groups, need.cpu, takes), groups)


def _share_drops(view: NodeView, need: Need, ctx: PlacementContext):
    """(unit index, FGD's fragmentation drop in milli) for each card a one-GPU share may take, one
    per distinct (room left, model): the measure ignores card order, so equal cards score alike
    and the first of them (lowest index) stands for all."""
    card, stats, before, groups = view_fragmentation(view, ctx.typical_shapes)
    seen = set()
    for i in fitting_units(view, need):
        key = (card.lefts[i], card.models[i])
        if key not in seen:
            seen.add(key)
            yield i, before - stats_total(stats_after(stats, groups, need.cpu, ((*key, need.milli),)), groups)


def _share_scores(view: NodeView, need: Need, ctx: PlacementContext):
    """(unit index, FGD's integer score) for each distinct card a one-GPU share may take."""
    for i, drop in _share_drops(view, need, ctx):
        yield i, _to_int(drop)


class FGD(BinPack):
    """Fragmentation gradient descent: the node (and card) whose fragmentation grows least."""

    name = "fgd"

    def pick(self, view: NodeView, need: Need, ctx: PlacementContext):
        return self.pick_scored(view, need, ctx)[0]

    def pick_scored(self, view: NodeView, need: Need, ctx: PlacementContext):
        """(picks, score) at once: a share's pick already computed the score of its card."""
        picks = default_pick(view, need)
        if picks is None:
            return None, 0
        if need.count != 1 or need.milli >= FREE:
            return picks, self._int_score(view, need, picks, ctx)
        best, best_score = None, -1
        for i, score in _share_scores(view, need, ctx):  # the card with the best score, first on ties
            if score > best_score:
                best, best_score = (i,), score
        return best, best_score

    def score(self, view: NodeView, need: Need, picks, ctx: PlacementContext) -> int:
        return self._int_score(view, need, picks, ctx)

    def cpu_margin(self, ctx: PlacementContext) -> int:
        """A node that keeps this much CPU after a need gives the need the same picks and score
        whatever its CPU: CPU enters the measure only as "does the node keep a typical shape's
        CPU", and with this much left it keeps them all."""
        return max_shape_cpu(ctx.typical_shapes)

    @staticmethod
    def _int_score(view, need, picks, ctx) -> int:
        return int(_sigmoid(frag_drop(view, need, picks, ctx) / 1000) * 100)

    def max_score(self, need: Need, ctx: PlacementContext) -> int:
        """No node scores higher: placing r milli lowers each typical shape's fragment by at most r
        (a fragment is the idle milli, or the slivers too small for the shape, and both shrink by
        at most what is taken), so the weighted drop is at most r times the weights' sum. Lets
        placement stop at the first node, in rank order, that reaches it."""
        weights = sum(weight for weight, _ in ctx.typical_shapes) if ctx.typical_shapes else 1.0
        return int(_sigmoid(need.count * need.milli * weights * (1 + 1e-9) / 1000) * 100)


_CPU_PER_MILLI: tuple = (None, 0.0)  # (shapes, value): the last mix asked about


def gpu_pods_cpu_per_milli(shapes) -> float:
    """CPU (milli) the typical GPU pods ask per milli-GPU, weighted as FGD weights the shapes;
    0.0 when no typical shape asks for a GPU (then nothing is stranded for lack of CPU)."""
    global _CPU_PER_MILLI
    if _CPU_PER_MILLI[0] is not shapes:
        cpu = sum(weight * shape.cpu for weight, shape in shapes if shape.milli)
        gpu = sum(weight * shape.milli * shape.count for weight, shape in shapes if shape.milli)
        _CPU_PER_MILLI = (shapes, cpu / gpu if gpu > 0 else 0.0)
    return _CPU_PER_MILLI[1]


_BOUND_WEIGHTS: tuple = (None, (0.0, {}))  # (shapes, value): the last mix asked about


def bound_shape_weights(shapes) -> tuple[float, dict[str, float]]:
    """(weight of the typical GPU shapes bound to models, that weight per model they allow)."""
    global _BOUND_WEIGHTS
    if _BOUND_WEIGHTS[0] is not shapes:
        total, allowed = 0.0, {}
        for weight, shape in shapes:
            if shape.milli and shape.models is not None:
                total += weight
                for model in shape.models:
                    allowed[model] = allowed.get(model, 0.0) + weight
        _BOUND_WEIGHTS = (shapes, (total, allowed))
    return _BOUND_WEIGHTS[1]


def model_mismatch_drop(view: NodeView, need: Need, picks, ctx: PlacementContext) -> float:
    """The part of FGD's drop that is only a model mismatch: FGD counts a card's whole idle as
    fragment for every typical shape bound to models that exclude the card's model, so taking
    any card "lowers fragmentation" by what it takes times those shapes' weight, without making
    room for anyone. On a node of one model (every openb node) this is exact; with no bound
    shape it is 0, and the score is FGD's."""
    total, allowed = bound_shape_weights(ctx.typical_shapes)
    if not total or need.mig_profile or need.pool:  # the measure does not see those cards
        return 0.0
    units = view.units
    return sum(need.milli * (total - allowed.get(units[i].model, 0.0)) for i in picks)


STRAND_CARDS = 16  # the most cards of one node the stranding term counts (see cpu_stranded)


def cpu_stranded(idle: int, cpu_free: int, cpu_per_milli: float) -> float:
    """Idle milli-GPU a node could not fill with the typical GPU pods for lack of CPU, were they
    to fill it in their usual proportion of CPU to GPU. At most `STRAND_CARDS` cards of it count:
    no node we know has more plain cards, and the bound makes a node that keeps that many cards'
    worth of CPU strand nothing, whatever else it holds (`GpuLedger.cpu_margin`)."""
    if cpu_per_milli <= 0:
        return 0.0
    return max(0.0, min(idle, STRAND_CARDS * FREE) - cpu_free / cpu_per_milli)


class GpuLedger(FGD):
    """gpuledger's policy: FGD's fragmentation gradient plus the GPU a placement strands for lack
    of CPU, and the fullest card among equal scores.

    FGD's measure sees CPU only as "does the next typical pod still fit"; on openb most of the
    GPU FGD leaves idle beyond the sub-card slivers sits on nodes whose CPU ran out first (free
    cards and slivers on nodes with no CPU left). So a GPU need's score adds to FGD's drop in
    fragmentation the drop in `cpu_stranded` (both in milli-GPU, so no weight to choose): the idle
    GPU of the node that the typical GPU pods, at their mean CPU per GPU, could not use. A pod
    lighter in CPU than that mean is drawn to nodes short of CPU, a heavier one is kept off them.
    CPU-only needs keep FGD's score: with the term they fill the CPU slack of empty nodes that
    8-GPU pods need (0.6 points worse on a mix with 4x the CPU-only pods, docs/benchmarks.md;
    openb: 4.22 against FGD's 4.74 Unallocated GPU % at 100 % arrived). The score stays FGD's
    integer sigmoid: finer scores spread load and lose 1 to 2 points on openb. Among cards of equal
    score a share takes the one with least room left. Whole-card claims keep NVLink-contiguous
    picks (`default_pick`); typical shapes come from the caller, or from the claims the allocator
    has seen (`DecideContext.typical_shapes`).
    """

    name = "gpuledger"
    TIE = 0.01  # below one step of the integer score: a tie-break, never an override

    def pick_scored(self, view: NodeView, need: Need, ctx: PlacementContext):
        picks = default_pick(view, need)
        if picks is None:
            return None, 0
        if need.count == 0:
            return picks, self._int_score(view, need, picks, ctx)
        strand = self._strand_drop(view, need, ctx)
        if need.count != 1 or need.milli >= FREE:
            return picks, self._gpu_score(view, need, picks, ctx, strand)
        best, best_score, best_int = None, None, 0
        for i, drop in _share_drops(view, need, ctx):
            score = _to_int(drop - model_mismatch_drop(view, need, (i,), ctx) + strand)
            ranked = score - self.TIE * view.units[i].milli_free / FREE
            if best_score is None or ranked > best_score:
                best, best_score, best_int = (i,), ranked, score
        return best, best_int

    def score(self, view: NodeView, need: Need, picks, ctx: PlacementContext) -> int:
        if need.count == 0:
            return self._int_score(view, need, picks, ctx)
        return self._gpu_score(view, need, picks, ctx, self._strand_drop(view, need, ctx))

    @staticmethod
    def _gpu_score(view: NodeView, need: Need, picks, ctx: PlacementContext, strand: float) -> int:
        drop = frag_drop(view, need, picks, ctx) - model_mismatch_drop(view, need, picks, ctx)
        return _to_int(drop + strand)

    @staticmethod
    def _strand_drop(view: NodeView, need: Need, ctx: PlacementContext) -> float:
        """How much `cpu_stranded` falls on the node if the need lands there (any cards: the
        term sees only totals). Like FGD's measure it sees plain cards outside pools only, so a
        MIG instance or a pool's card changes nothing."""
        if need.mig_profile or need.pool:
            return 0.0
        rate = gpu_pods_cpu_per_milli(ctx.typical_shapes)
        idle = view_fragmentation(view, ctx.typical_shapes)[1].idle
        taken = need.count * need.milli
        return (cpu_stranded(idle, view.cpu_free, rate)
                - cpu_stranded(idle - taken, view.cpu_free - need.cpu, rate))

    def cpu_margin(self, ctx: PlacementContext) -> int:
        """FGD's margin, and enough CPU for `STRAND_CARDS` cards of typical GPU pods: a node that
        keeps it strands nothing after the need, so the term's drop is the node's stranded GPU
        before, whatever the need's CPU."""
        rate = gpu_pods_cpu_per_milli(ctx.typical_shapes)
        keeps = math.ceil(rate * STRAND_CARDS * FREE) + 1 if rate > 0 else 0
        return max(super().cpu_margin(ctx), keeps)

    def max_score(self, need: Need, ctx: PlacementContext) -> int:
        """FGD's bound plus the term's: `cpu_stranded` falls by at most the GPU taken less the
        GPU the need's CPU would have served, `max(0, r - cpu / rate)`."""
        weights = sum(weight for weight, _ in ctx.typical_shapes) if ctx.typical_shapes else 1.0
        taken = need.count * need.milli
        rate = gpu_pods_cpu_per_milli(ctx.typical_shapes)
        strand = max(0.0, taken - need.cpu / rate) if rate > 0 and need.count else 0.0
        return _to_int((taken * weights + strand) * (1 + 1e-9))


def _to_int(drop: float) -> int:
    """FGD's integer score of a drop in milli."""
    return int(_sigmoid(drop / 1000) * 100)


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
