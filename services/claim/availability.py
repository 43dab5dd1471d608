"""Live GPU availability per model, from the claim service's fold (pure: no I/O).

Counts allocatable units of schedulable nodes: whole cards, and MIG instances separately (a card
in MIG mode is offered as its instances). `free` is a unit nobody holds any share of and that is
healthy on a node with room under its cap of live claims; `max_per_node` is the most cards of the
model one node has (what a multi-GPU worker or slot can get on this fleet).

A node that holds as many live claims (or device grants) as its cap allows takes no claim, so its
idle units are not `free` (or `mig_free`); its idle cards are `free_at_cap` (with `nodes_at_cap`); `nodes_over_cap` counts those
holding more than the cap (it was lowered below what they held, which evicts nothing). Until
session 35 they were counted free, and `gpuledger gpus` offered cards no claim could get."""

from __future__ import annotations

from ledger.state import FREE, State, cap_use


def availability(state: State) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for node in state.nodes.values():
        if not node.schedulable:
            continue
        held, cap = cap_use(state, node) if node.units else (0, 1)
        at_cap = held >= cap
        per_model: dict[str, int] = {}
        for unit in node.units:
            row = out.setdefault(unit.model, {"cards": 0, "free": 0, "healthy": 0, "mig_instances": 0,
                                              "mig_free": 0, "nodes": 0, "max_per_node": 0,
                                              "free_at_cap": 0, "nodes_at_cap": 0, "nodes_over_cap": 0})
            idle = unit.healthy and not unit.holders and unit.milli_free == FREE
            free = idle and not at_cap
            if unit.mig_index >= 0:
                row["mig_instances"] += 1
                row["mig_free"] += free
                continue
            row["cards"] += 1
            row["free"] += free
            row["free_at_cap"] += idle and at_cap
            row["healthy"] += unit.healthy
            per_model[unit.model] = per_model.get(unit.model, 0) + 1
        for model in {unit.model for unit in node.units}:
            out[model]["nodes_at_cap"] += at_cap
            out[model]["nodes_over_cap"] += held > cap
        for model, count in per_model.items():
            out[model]["nodes"] += 1
            out[model]["max_per_node"] = max(out[model]["max_per_node"], count)
    return out
