"""The fragmentation measure's memos, owned by whoever decides and passed in.

One `FragCache` per decider (the allocator, one simulation, one what-if run, one benchmark): the
measure per card, per node view and the compiled shape mix. It reaches the scorers through
`DecideContext.frag` and `PlacementContext.frag`, never a module global, so a what-if run never
shares (or clears) the live allocator's memos. All of it is void when the shape mix changes."""

from __future__ import annotations


class FragCache:
    CARDS_LIMIT = 1 << 18  # values per card; cleared whole when full (a new mix rebuilds them anyway)
    VIEWS_LIMIT = 1 << 16

    def __init__(self) -> None:
        self.shapes: object = None  # the mix the memos are for, compared by identity
        self.cards: dict = {}  # (cpu free, sorted (left, model)) -> F_n
        self.views: dict = {}  # id(view) -> (view, ...): the view is kept, so its id is not reused
        self.compiled: dict = {}  # the mix compiled: "groups", "max_cpu", "cpu_per_milli"

    def sync(self, shapes) -> None:
        """Start again if `shapes` is another mix (a checkpoint, another trace)."""
        if shapes is not self.shapes:
            self.cards.clear()
            self.views.clear()
            self.compiled.clear()
            self.shapes = shapes
