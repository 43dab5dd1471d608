"""FGD (fragmentation gradient descent) and gpuledger's policy, FGD plus the GPU a placement would
strand for lack of CPU. Both score by the drop of the fragmentation measure (fragmentation.py),
memoised in the caller's FragCache (`ctx.frag`). Registered in scorers.py."""

from __future__ import annotations

import math

from services.allocator.core.baselines import BinPack
from services.allocator.core.card_waste import max_waste_drop, waste_drop
from services.allocator.core.demand import Need
from services.allocator.core.frag_cache import FragCache
from services.allocator.core.fragmentation import max_shape_cpu, stats_after, stats_total, view_fragmentation
from services.allocator.core.model_mismatch import model_mismatch_drop
from services.allocator.core.picks import default_pick, fitting_units
from services.allocator.core.policy import PlacementContext
from ledger.state import FREE, NodeView


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def frag_drop(view: NodeView, need: Need, picks, ctx: PlacementContext) -> float:
    """How much the node's fragmentation falls (milli) if the need takes `picks` there."""
    card, stats, before, groups = view_fragmentation(view, ctx.typical_shapes, ctx.frag)
    takes = [(card.lefts[i], card.models[i], need.milli) for i in picks]
    return before - stats_total(stats_after(stats, groups, need.cpu, takes), groups)


def _share_drops(view: NodeView, need: Need, ctx: PlacementContext):
    """(unit index, FGD's fragmentation drop in milli) for each card a one-GPU share may take, one
    per distinct (room left, model): the measure ignores card order, so equal cards score alike
    and the first of them (lowest index) stands for all."""
    card, stats, before, groups = view_fragmentation(view, ctx.typical_shapes, ctx.frag)
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
        return max_shape_cpu(ctx.typical_shapes, ctx.frag)

    @staticmethod
    def _int_score(view, need, picks, ctx) -> int:
        return int(_sigmoid(frag_drop(view, need, picks, ctx) / 1000) * 100)

    def max_score(self, need: Need, ctx: PlacementContext) -> int:
        """No node scores higher: placing r milli lowers each typical shape's fragment by at most r
        (a fragment is the idle milli, or the slivers too small for the shape, and both shrink by
        at most what is taken), so the weighted drop is at most r times the weights' sum. Lets
        placement stop at the first node, in rank order, that reaches it."""
        weights = mix_weight(ctx.typical_shapes, ctx.frag)
        return int(_sigmoid(need.count * need.milli * weights * (1 + 1e-9) / 1000) * 100)


def mix_weight(shapes, cache: FragCache) -> float:
    """The typical shapes' weights summed (1.0 without a mix), memoised with the mix: every
    choice's ceiling needs it (summed in the mix's order, so the same float as before)."""
    if shapes is not cache.shapes:  # a new mix: the memos start again
        cache.sync(shapes)
    weights = cache.compiled.get("weights")
    if weights is None:
        weights = cache.compiled["weights"] = sum(weight for weight, _ in shapes) if shapes else 1.0
    return weights


def gpu_pods_cpu_per_milli(shapes, cache: FragCache | None = None) -> float:
    """CPU (milli) the typical GPU pods ask per milli-GPU, weighted as FGD weights the shapes;
    0.0 when no typical shape asks for a GPU (then nothing is stranded for lack of CPU).
    Memoised with the mix in the caller's cache."""
    cache = cache if cache is not None else FragCache()
    if shapes is not cache.shapes:  # a new mix: the memos start again
        cache.sync(shapes)
    rate = cache.compiled.get("cpu_per_milli")
    if rate is None:
        cpu = sum(weight * shape.cpu for weight, shape in shapes if shape.milli)
        gpu = sum(weight * shape.milli * shape.count for weight, shape in shapes if shape.milli)
        rate = cache.compiled["cpu_per_milli"] = cpu / gpu if gpu > 0 else 0.0
    return rate


CEILINGS_KEPT = 4096  # needs whose ceiling `GpuLedger.max_score` keeps (all let go when full)
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
    integer sigmoid: finer scores spread load and lose 1 to 2 points on openb. FGD's drop is taken
    without its model mismatch (model_mismatch.py): with half the openb pods bound to models it
    sent unbound pods to the scarce models (5.2 % unallocated at 100 %, now 4.2); without bound
    shapes nothing changes. A plain share (one card, no MIG, no pool) is scored instead by the
    fall in its card's waste (card_waste.py: the room left, priced by the best packing of the
    typical mix) plus the same stranding term: FGD looks one pod ahead and put a 320 beside a
    lone 470 (210 left, room no typical pod fits, and the 470's partner lost) rather than on a
    fresh card that a 650 or two more 320s fill. The room a share leaves is what decides how many
    cards the shares take in the end; FGD's drop for a share, kept at full or half weight beside
    it, did no better on openb (docs/benchmarks.md; 4.09 -> 3.78 % at 100 % arrived). Among cards
    of equal score a share takes the one with least room left. A card whose model the bound
    shapes want far beyond its share of the fleet is priced (model_scarcity.py): a pod that could
    go elsewhere leaves it to them (model-scarce-15: 8.50 -> 5.11 % at 100 % arrived, FGD 6.41). Whole-card claims keep
    NVLink-contiguous picks (`default_pick`); typical shapes come from the caller, or from the
    claims the allocator has seen (`DecideContext.typical_shapes`).
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
        for i, drop in self._card_drops(view, need, ctx):
            score = _to_int(drop + strand - _scarcity_cost(view, need, (i,), ctx))
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
        if _plain_share(need):
            drop = waste_drop(view.units[picks[0]].milli_free, need.milli, ctx.typical_shapes, ctx.frag)
        else:
            drop = frag_drop(view, need, picks, ctx) - model_mismatch_drop(view, need, picks, ctx)
        return _to_int(drop + strand - _scarcity_cost(view, need, picks, ctx))

    @staticmethod
    def _card_drops(view: NodeView, need: Need, ctx: PlacementContext):
        """(unit index, drop in milli) for each distinct card a one-GPU share may take. A plain
        share's drop is the fall in its card's waste (card_waste.py), the room it leaves priced
        by the best packing of the typical mix: FGD's measure looks one pod ahead, this at what
        the room can still become. A MIG instance or a pool's card keeps FGD's drop: the waste,
        like the measure, sees plain cards outside pools only."""
        if not _plain_share(need):
            for i, drop in _share_drops(view, need, ctx):
                yield i, drop - model_mismatch_drop(view, need, (i,), ctx)
            return
        seen = set()
        for i in fitting_units(view, need):
            unit = view.units[i]
            key = (unit.milli_free, unit.model)  # the room decides the waste, the model the price
            if key not in seen:  # equal cards score alike
                seen.add(key)
                yield i, waste_drop(unit.milli_free, need.milli, ctx.typical_shapes, ctx.frag)

    @staticmethod
    def _strand_drop(view: NodeView, need: Need, ctx: PlacementContext) -> float:
        """How much `cpu_stranded` falls on the node if the need lands there (any cards: the
        term sees only totals). Like FGD's measure it sees plain cards outside pools only, so a
        MIG instance or a pool's card changes nothing."""
        if need.mig_profile or need.pool:
            return 0.0
        rate = gpu_pods_cpu_per_milli(ctx.typical_shapes, ctx.frag)
        idle = view_fragmentation(view, ctx.typical_shapes, ctx.frag)[1].idle
        taken = need.count * need.milli
        return (cpu_stranded(idle, view.cpu_free, rate)
                - cpu_stranded(idle - taken, view.cpu_free - need.cpu, rate))

    def cpu_margin(self, ctx: PlacementContext) -> int:
        """FGD's margin, and enough CPU for `STRAND_CARDS` cards of typical GPU pods: a node that
        keeps it strands nothing after the need, so the term's drop is the node's stranded GPU
        before, whatever the need's CPU."""
        rate = gpu_pods_cpu_per_milli(ctx.typical_shapes, ctx.frag)
        keeps = math.ceil(rate * STRAND_CARDS * FREE) + 1 if rate > 0 else 0
        return max(super().cpu_margin(ctx), keeps)

    def max_score(self, need: Need, ctx: PlacementContext) -> int:
        """FGD's bound (for a plain share, the largest fall of a card's waste) plus the
        stranding term's: `cpu_stranded` falls by at most the GPU taken less the GPU the need's
        CPU would have served, `max(0, r - cpu / rate)`. Memoised per need with the mix (a
        pure function of both): every choice asks it, most for needs asked before."""
        cache = ctx.frag
        if ctx.typical_shapes is not cache.shapes:  # a new mix: the memos start again
            cache.sync(ctx.typical_shapes)
        ceilings = cache.compiled.get("ceilings")
        if ceilings is None or len(ceilings) >= CEILINGS_KEPT:
            ceilings = cache.compiled["ceilings"] = {}
        found = ceilings.get(need)
        if found is None:
            found = ceilings[need] = self._max_score(need, ctx)
        return found

    @staticmethod
    def _max_score(need: Need, ctx: PlacementContext) -> int:
        weights = mix_weight(ctx.typical_shapes, ctx.frag)
        taken = need.count * need.milli
        rate = gpu_pods_cpu_per_milli(ctx.typical_shapes, ctx.frag)
        strand = max(0.0, taken - need.cpu / rate) if rate > 0 and need.count else 0.0
        if _plain_share(need):  # scored by its card's waste, not FGD's drop
            frag = max_waste_drop(need.milli, ctx.typical_shapes, ctx.frag)  # may be below 0: exact
        else:
            frag = taken * weights
        return _to_int((frag + strand) * (1 + 1e-9))


def _scarcity_cost(view: NodeView, need: Need, picks, ctx: PlacementContext) -> float:
    """What the picked cards cost the pods bound to their models (model_scarcity.py); 0 for a
    MIG instance or a pool's card, which typical shapes do not see."""
    prices = ctx.model_prices
    if prices is None or need.mig_profile or need.pool:
        return 0.0
    units = view.units
    return prices.cost(need, [units[i].model for i in picks])


def _plain_share(need: Need) -> bool:
    """A share of one plain card outside pools: gpuledger scores it by the room it leaves."""
    return need.count == 1 and need.milli < FREE and not (need.mig_profile or need.pool)


def _to_int(drop: float) -> int:
    """FGD's integer score of a drop in milli."""
    return int(_sigmoid(drop / 1000) * 100)
