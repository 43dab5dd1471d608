"""Which units inside one node a need takes: eligibility, NVLink-contiguous whole cards, best-fit
shares. `default_pick` is what every built-in policy picks with; it refuses exactly the nodes the
rules marked `decided_by_pick` refuse (see rules.py and its property test)."""

from __future__ import annotations

from ledger.state import FREE, NodeView, UnitView
from services.allocator.core.demand import Need


ANY_MIG = "*"  # a share of a MIG pool that names no profile: any of the pool's instances


def eligible(unit: UnitView, need: Need) -> bool:
    """Right model, pool and kind (card or MIG profile) for this need."""
    if need.models is not None and unit.model not in need.models:
        return False
    if need.mig_profile == ANY_MIG:
        return unit.pool == need.pool and unit.mig_profile != ""
    return unit.pool == need.pool and unit.mig_profile == need.mig_profile


def fitting_units(view: NodeView, need: Need) -> list[int]:
    if need.milli >= FREE:
        return [i for i, u in enumerate(view.units) if u.is_free and eligible(u, need)]
    return [i for i, u in enumerate(view.units) if u.can_share(need.milli) and eligible(u, need)]


def pick_contiguous(view: NodeView, need: Need) -> tuple[int, ...] | None:
    """Whole units: all from one NVLink island if possible (the smallest island that fits, so
    big islands stay whole for big claims), else the islands with most free units first."""
    free = fitting_units(view, need)
    if len(free) < need.count:
        return None
    by_island: dict[int, list[int]] = {}
    for i in free:
        by_island.setdefault(view.units[i].island, []).append(i)
    fitting = [ids for ids in by_island.values() if len(ids) >= need.count]
    if fitting:
        best = min(fitting, key=lambda ids: (len(ids), ids[0]))
        return tuple(best[: need.count])
    ordered = sorted(by_island.values(), key=lambda ids: (-len(ids), ids[0]))
    picked = [i for ids in ordered for i in ids][: need.count]
    return tuple(sorted(picked))


def pick_best_fit(view: NodeView, need: Need) -> tuple[int, ...] | None:
    """Shares: the units with the least room that still fits (lowest index on ties)."""
    fits = fitting_units(view, need)
    if len(fits) < need.count:
        return None
    fits.sort(key=lambda i: (view.units[i].milli_free, i))
    return tuple(sorted(fits[: need.count]))


def pick_spread_first(view: NodeView, need: Need) -> tuple[int, ...] | None:
    """Time-sliced slots (seed 004): one slot per device before a second on any, as the pool's
    device plugin hands them out; the emptiest device first, lowest index on ties."""
    fits = fitting_units(view, need)
    if len(fits) < need.count:
        return None
    fits.sort(key=lambda i: (view.units[i].holders, -view.units[i].milli_free, i))
    return tuple(sorted(fits[: need.count]))


def one_island_fits(view: NodeView, need: Need, contiguous) -> bool:
    """Seed 001's `policy: contiguous` (`contiguous` True): every GPU of the claim from one NVLink
    island. A tensor-parallel need (`need.island`) too, on a node with an island of that many GPUs
    of its kind, free or not (one island could hold it later); on a node without one its GPUs may
    span islands, as no wait would help there."""
    if need.count <= 1:
        return True
    if contiguous is not True and not (need.island and _largest_island(view, need) >= need.count):
        return True
    per_island: dict[int, int] = {}
    for i in fitting_units(view, need):
        island = view.units[i].island
        per_island[island] = per_island.get(island, 0) + 1
    return max(per_island.values(), default=0) >= need.count


def _largest_island(view: NodeView, need: Need) -> int:
    sizes: dict[int, int] = {}
    for unit in view.units:
        if eligible(unit, need):
            sizes[unit.island] = sizes.get(unit.island, 0) + 1
    return max(sizes.values(), default=0)


def pick_best_fit_in_island(view: NodeView, need: Need) -> tuple[int, ...] | None:
    """Shares of a tensor-parallel need: best fit within one island (the island whose picked
    units leave the least room, lowest index on ties); best fit across islands only where no
    island has enough (the `not-contiguous` rule lets such a node pass only when none could)."""
    fits = fitting_units(view, need)
    if len(fits) < need.count:
        return None
    by_island: dict[int, list[int]] = {}
    for i in sorted(fits, key=lambda i: (view.units[i].milli_free, i)):
        by_island.setdefault(view.units[i].island, []).append(i)
    best = None
    for ids in by_island.values():
        if len(ids) >= need.count:
            chosen = ids[:need.count]
            key = (sum(view.units[i].milli_free for i in chosen), min(chosen))
            if best is None or key < best[0]:
                best = (key, chosen)
    if best is None:
        return pick_best_fit(view, need)
    return tuple(sorted(best[1]))


def default_pick(view: NodeView, need: Need) -> tuple[int, ...] | None:
    """Host CPU and memory first, then the units: contiguous whole cards or best-fit shares."""
    if view.cpu_free < need.cpu or view.mem_free < need.mem:
        return None
    if need.count == 0:
        return ()
    if need.milli >= FREE:
        return pick_contiguous(view, need)
    if need.island:
        return pick_best_fit_in_island(view, need)
    return pick_best_fit(view, need)
