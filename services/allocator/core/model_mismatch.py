"""The part of FGD's fragmentation drop that is only a model mismatch (gpuledger leaves it out).

FGD's measure counts a card's whole idle as fragment for every typical shape bound to models
that exclude the card's model. So taking *any* card "lowers fragmentation" by what it takes times
the weight of the shapes that exclude its model, without making room for anyone: unbound pods are
sent to the models that bound shapes name least, in proportion to the bound shapes' weight, not
to any shortage. On openb with half the GPU pods bound (most lists name G2) that filled the scarce
models first, and the pods bound to them failed while G2 cards stayed free (docs/benchmarks.md).
"""

from __future__ import annotations

from services.allocator.core.demand import Need
from services.allocator.core.frag_cache import FragCache
from services.allocator.core.policy import PlacementContext
from ledger.state import NodeView


def bound_shape_weights(shapes, cache: FragCache | None = None) -> tuple[float, dict[str, float]]:
    """(weight of the typical GPU shapes bound to models, that weight per model they allow);
    memoised with the mix in the caller's cache."""
    cache = cache if cache is not None else FragCache()
    cache.sync(shapes)
    found = cache.compiled.get("bound_weights")
    if found is None:
        total, allowed = 0.0, {}
        for weight, shape in shapes:
            if shape.milli and shape.models is not None:
                total += weight
                for model in shape.models:
                    allowed[model] = allowed.get(model, 0.0) + weight
        found = cache.compiled["bound_weights"] = (total, allowed)
    return found


def model_mismatch_drop(view: NodeView, need: Need, picks, ctx: PlacementContext) -> float:
    """What FGD's drop owes to the mismatch alone when the need takes `picks`: each card's take
    times the weight of the bound shapes that exclude its model. Exact on a node of one model
    (every openb node: such a shape never fits there, so its fragment is the node's idle before
    and after); 0 without bound shapes, and for MIG or pool needs, whose cards the measure does
    not see."""
    total, allowed = bound_shape_weights(ctx.typical_shapes, ctx.frag)
    if not total or need.mig_profile or need.pool:
        return 0.0
    units = view.units
    return sum(need.milli * (total - allowed.get(units[i].model, 0.0)) for i in picks)
