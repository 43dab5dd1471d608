"""What `gpuledger state at` prints: the allocator core's state at a point of the log, as plain data."""

from __future__ import annotations

from typing import Any

from ledger.state import State, cap_use


def state_summary(state: State) -> dict[str, Any]:
    by_status: dict[str, int] = {}
    for claim in state.claims.values():
        by_status[claim.status] = by_status.get(claim.status, 0) + 1
    return {
        "seq": state.last_seq,
        "claims": dict(sorted(by_status.items())),
        "pending": [c for c in state.pending],
        "nodes": [_node(state, n) for n in sorted(state.nodes)],
        "devices_in_use": [_device(u) for u in sorted(state.units.values(), key=_unit_key)
                           if u.holders],
        "namespaces": {ns: _usage(state, ns) for ns in sorted(set(state.usage) | set(state.quotas))},
        "pools": sorted(state.pools),
    }


def _unit_key(unit) -> tuple:
    return (unit.node, unit.index, unit.mig_index, unit.uuid)


def _node(state: State, name: str) -> dict[str, Any]:
    node = state.nodes[name]
    in_use = sum(1 for u in node.units if u.holders)
    held, cap = cap_use(state, node)  # over it: a cap lowered below what the node held (evicts nothing)
    return {"name": name, "condition": node.condition, "lost": node.lost, "devices": len(node.units),
            "devices_in_use": in_use, "claims": len(node.claims), "max_claims": cap, "over_cap": held > cap,
            "last_heartbeat": node.last_heartbeat}


def _device(unit) -> dict[str, Any]:
    return {"uuid": unit.uuid, "node": unit.node, "index": unit.index, "model": unit.model,
            "milli_free": unit.milli_free, "holders": dict(sorted(unit.holders.items()))}


def _usage(state: State, namespace: str) -> dict[str, Any]:
    usage = state.usage.get(namespace)
    return {"quota": namespace in state.quotas,
            "gpus": usage.gpus if usage else 0, "workers": usage.workers if usage else 0,
            "tflops": round(usage.tflops, 3) if usage else 0.0,
            "vram_mib": usage.vram_mib if usage else 0}
