"""What taking a card of a model costs the pods bound to that model (gpuledger's policy).

FGD's measure counts a card's idle as fragment for every typical shape bound to models that
exclude the card (model_mismatch.py): it steers by how often bound shapes name a model, blind to
how many cards of it there are. On openb with half the pods bound to lists drawn in proportion to
the fleet that sent unbound pods to the rare models (gpuledger leaves that term out); with pods
bound to the rarest models it is what kept those models for them (FGD 6.4 % unallocated against
gpuledger's 8.5 at 100 % arrived, docs/benchmarks.md).

This prices a model by its *pressure*: the share of the typical GPU demand bound to it, over the
share of the fleet's cards it holds,

    pressure(m) = sum over bound shapes k that allow m of  (demand_k / demand) / (cards(S_k) / cards)

where demand_k is the shape's weight times its GPU milli and S_k the models it allows. When bound
lists are drawn in proportion to the fleet every model's pressure is about the bound share of the
demand (the sum of demand_k / demand), the same everywhere, and nothing is priced. A model pressed
more than `PRESSED` times that share is priced at its pressure less the share; a need pays
`WEIGHT` x price for every milli it takes there, less the price of the cheapest model it allows
(so a pod bound to the pressed models is not steered among them by their price). The price lowers
the drop inside FGD's integer sigmoid: a node of a pressed model still takes a pod that fits
nowhere else. Without bound shapes nothing is priced and the default openb trace (no gpu_spec)
decides exactly as before. Measured on the openb variants in docs/benchmarks.md (session 24).
"""

from __future__ import annotations

from services.allocator.core.demand import Need
from services.allocator.core.frag_cache import FragCache
from ledger.state import State

# Chosen on model-scarce-15 (seeds 42-45) and checked on every variant: a weight of 0.5 with
# the share subtracted left the scarce models to unbound pods (6.44 % unallocated at 100 %
# arrived against 5.11 at 0.8), 1.0 cost more at 130 % (4.69 against 4.29).
PRESSED = 2.0  # a model is priced only when pressed this many times the bound share
WEIGHT = 0.8  # milli of score given up per milli taken, per unit of price above the need's floor


class ModelPrices:
    """Each model's pressure, and the least pressure among a set of models (memoised)."""

    __slots__ = ("pressure", "_floors")

    def __init__(self, pressure: dict[str, float]):
        self.pressure = pressure
        self._floors: dict[frozenset[str] | None, float] = {}

    def floor(self, models: frozenset[str] | None) -> float:
        found = self._floors.get(models)
        if found is None:
            pool = self.pressure if models is None else [m for m in models if m in self.pressure]
            found = self._floors[models] = min((self.pressure[m] for m in pool), default=0.0)
        return found

    def cost(self, need: Need, models_taken) -> float:
        """Score (milli) the need gives up by taking one card of each model in `models_taken`."""
        floor = self.floor(need.models)
        pressure = self.pressure
        return WEIGHT * need.milli * sum(pressure.get(m, floor) - floor for m in models_taken)


def fleet_cards(state: State) -> dict[str, int]:
    """Whole cards (not MIG instances) of each model on the registered nodes: counted once, then
    kept up to date by the fold as nodes register (`ledger.evolve._count_cards`)."""
    cards = state.model_cards
    if cards is None:
        cards = {}
        for unit in state.units.values():
            if not unit.mig_profile:
                cards[unit.model] = cards.get(unit.model, 0) + 1
        state.model_cards = cards
    return cards


def model_prices(mix, cards: dict[str, int], cache: FragCache) -> ModelPrices | None:
    """The prices for this shape mix and fleet, or None when no typical GPU shape is bound to
    models (nothing to price). The same object while the mix and the fleet's card counts stay the
    same (a node that registers again with the same cards changes nothing), so the score memo,
    which starts again when the prices object changes, stays valid."""
    found = cache.compiled.get("model_prices")  # cleared with the rest when the measure's mix changes
    if found is not None and found[0] is mix and found[1] == cards:
        return found[2]
    prices = _prices(mix, cards) if mix else None
    cache.compiled["model_prices"] = (mix, dict(cards), prices)
    return prices


def _prices(shapes, cards: dict[str, int]) -> ModelPrices | None:
    demand = sum(weight * shape.milli * shape.count for weight, shape in shapes if shape.milli)
    total_cards = sum(cards.values())
    if demand <= 0 or total_cards <= 0:
        return None
    pressure = {model: 0.0 for model, n in cards.items() if n > 0}
    bound_share = 0.0
    for weight, shape in shapes:
        if not shape.milli or shape.models is None:
            continue
        allowed = [m for m in shape.models if cards.get(m, 0) > 0]
        held = sum(cards[m] for m in allowed)
        if not held:
            continue  # no card it may take: it presses on nothing here
        share = weight * shape.milli * shape.count / demand
        bound_share += share
        for model in allowed:
            pressure[model] += share / (held / total_cards)
    if not bound_share:
        return None
    # Lists drawn in proportion to the fleet press every model about as much as the bound share
    # of the demand: no model is wanted more than another, and pricing the noise around that share
    # steered unbound pods off the largest model (model-bound-30: 3.77 -> 4.08 % unallocated).
    # Only a model pressed well beyond it (PRESSED times) is priced, by what it carries beyond it.
    # None when nothing is priced: a new prices object starts the score memos again, and a bound
    # mix that moves without pressing any model must not cost that.
    prices = {m: p - bound_share if p > PRESSED * bound_share else 0.0 for m, p in pressure.items()}
    return ModelPrices(prices) if any(prices.values()) else None
