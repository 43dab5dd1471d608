"""A gang the fleet could never hold at once, even empty: its members each fit some node, but not
all of them together. Told by bounds that never overstate: a gang named here could not fit; one
that passes may still not (exact packing is a search the decision pass does not make)."""

from __future__ import annotations

from typing import NamedTuple

from schemas.types import Reason

from ledger.state import State
from services.allocator.core.demand import Need
from services.allocator.core.explain import empty_takers
from services.allocator.core.policy import PlacementContext


class Least(NamedTuple):
    """The least a member takes of each resource over the ways it may be taken."""

    units: int  # whole GPUs (shares and MIG slices count none: the bound stays safe)
    cpu: int
    mem: int

    @staticmethod
    def of(needs: list[Need]) -> "Least":
        return Least(min(n.count if n.whole else 0 for n in needs), min(n.cpu for n in needs),
                     min(n.mem for n in needs))


def gang_never_reason(state: State, gang_id: str,
                      members: list[tuple[list[Need], PlacementContext]]) -> Reason | None:
    """`never-satisfiable` when the nodes that could take any member, were they empty, lack the
    room for all of them together: in whole GPUs, CPU or memory summed, or in members per node."""
    takers: dict[int, tuple] = {}  # group id -> (group, the least any member takes on it)
    total = Least(0, 0, 0)
    done: set[tuple] = set()  # (need, rule arguments) already taken in: its takers depend on no more
    for needs, ctx in members:
        for need in needs:
            if (need, ctx.args) in done:  # a member like one before (a gang of equal members):
                continue  # the same takers and least, merged already (min of equals: no change)
            done.add((need, ctx.args))
            least = Least.of([need])
            for group in empty_takers(state, need, ctx):
                seen = takers.get(id(group))
                takers[id(group)] = (group, least if seen is None else Least(*map(min, seen[1], least)))
        if needs:
            total = Least(*(a + b for a, b in zip(total, Least.of(needs))))
    if not takers or any(not needs for needs, _ in members):
        return None  # no node takes some member at all: that member's own reason says so
    groups = list(takers.values())
    units = cpu = mem = 0  # the takers' room, in one walk (thousands of groups at 10,000 nodes)
    for g, _ in groups:
        nodes, view = len(g.ranks), g.view
        units += nodes * len(view.units)
        cpu += nodes * view.static.cpu_total
        mem += nodes * view.static.mem_total
    room = Least(units, cpu, mem)
    for name, need, have in zip(("whole GPUs", "CPU (milli)", "memory (MiB)"), total, room):
        if need > have:
            return _never(gang_id, len(members), f"its members take {need} {name} together; the nodes "
                                                 f"that could take any of them have {have} in all")
    slots = sum(len(g) * _copies(g.view, least) for g, least in groups)
    if slots < len(members):
        return _never(gang_id, len(members), f"{len(members)} members, and the nodes that could take "
                                             f"them hold at most {slots} at once")
    return None


def _copies(view, least: Least) -> int:
    """The most members one empty node of this view could hold, each taking at least `least`."""
    bounds = [len(view.units) // least.units if least.units else None,
              view.static.cpu_total // least.cpu if least.cpu else None,
              view.static.mem_total // least.mem if least.mem else None]
    known = [b for b in bounds if b is not None]
    return min(known) if known else 1 << 30


def _never(gang_id: str, members: int, why: str) -> Reason:
    return Reason("never-satisfiable", f"gang {gang_id} could never fit at once, even on an empty "
                                       f"fleet: {why}", members)
