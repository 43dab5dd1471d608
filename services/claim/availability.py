"""Live GPU availability per model, from the claim service's fold (pure: no I/O).

Counts allocatable units of schedulable nodes: whole cards, and MIG instances separately (a card
in MIG mode is offered as its instances). `free` is a unit nobody holds any share of and that is
healthy; `max_per_node` is the most cards of the model one node has (what a multi-GPU worker or
slot can get on this fleet)."""

from __future__ import annotations

from ledger.state import FREE, State


def availability(state: State) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for node in state.nodes.values():
        if not node.schedulable:
            continue
        per_model: dict[str, int] = {}
        for unit in node.units:
            row = out.setdefault(unit.model, {"cards": 0, "free": 0, "healthy": 0, "mig_instances": 0,
                                              "mig_free": 0, "nodes": 0, "max_per_node": 0})
            free = unit.healthy and not unit.holders and unit.milli_free == FREE
            if unit.mig_index >= 0:
                row["mig_instances"] += 1
                row["mig_free"] += free
                continue
            row["cards"] += 1
            row["free"] += free
            row["healthy"] += unit.healthy
            per_model[unit.model] = per_model.get(unit.model, 0) + 1
        for model, count in per_model.items():
            out[model]["nodes"] += 1
            out[model]["max_per_node"] = max(out[model]["max_per_node"], count)
    return out
