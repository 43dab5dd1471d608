"""Pool commands as pure functions: (state, command, facts) -> the event to append, or a refusal.

The service appends the event fenced on the pool's subject, so two racing writers cannot both
act on the same view; the loser catches up and asks these functions again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import msgspec

from schemas import subjects
from schemas.commands import CreatePool, DeletePool, IgnoreDevice, Reply, SetFleetDefaults, UpdatePool, fail, ok
from schemas.events import (DeviceIgnoreChanged, Event, FleetDefaultsSet, PoolAccessChanged, PoolCreated,
                            PoolDeleted)
from ledger.state import State
from services.pool_controller.projection import allocations_in_pool
from services.pool_controller.validation import (
    MUTABLE_FIELDS,
    ClusterFacts,
    immutable_changes,
    validate_access,
    validate_pool,
)


@dataclass(frozen=True)
class Append:
    """Append `event` to `subject`; `key` makes the append idempotent (with the fence seq)."""

    subject: str
    event: Event
    key: str
    reply: Reply


Outcome = Append | Reply


def decide_create(state: State, cmd: CreatePool, facts: ClusterFacts, now: float) -> Outcome:
    """A new, valid pool whose name is free; re-creating an identical pool is a no-op."""
    pool = cmd.pool
    stored = state.pools.get(pool.name)
    if stored is not None:
        if stored == pool:
            return ok({"pool": pool.name, "created": False})
        return fail("conflict", f"pool {pool.name} already exists; only access and scheduling may change "
                    "(pool update)", "pool.name")
    subject = subjects.pool(pool.name)
    other = next((name for name in state.pools if subjects.pool(name) == subject), None)
    if other is not None:  # `gpu.a` and `gpu_a` ('.' is written '_'), as claims, quotas, endpoints
        return fail("conflict", f"pool {pool.name} would share the subject {subject} with pool {other} "
                    "('.' is written as '_'): choose another name", "pool.name")
    problems = validate_pool(pool, facts)
    if problems:
        return _invalid(problems)
    return Append(subject, PoolCreated(pool=pool, at=now),
                  "create:" + _digest(pool), ok({"pool": pool.name, "created": True}))


def decide_update(state: State, cmd: UpdatePool, now: float) -> Outcome:
    """Only access (namespaces, service accounts, groups) and scheduling (strategy, topology key)
    may change after creation."""
    wanted = cmd.pool
    stored = state.pools.get(wanted.name)
    if stored is None:
        return fail("not-found", f"pool {wanted.name} does not exist", "pool.name")
    changed = immutable_changes(stored, wanted)
    if changed:
        return fail("invalid", f"immutable after creation: {', '.join(changed)} (only "
                    f"{', '.join(MUTABLE_FIELDS)} may change; delete and re-create the pool "
                    "to change the rest)", f"pool.{changed[0]}")
    problems = validate_access(wanted)
    if problems:
        return _invalid(problems)
    if stored == wanted:
        return ok({"pool": wanted.name, "changed": False})
    scheduling = {"strategy": wanted.strategy, "topology_key": wanted.topology_key} \
        if (wanted.strategy, wanted.topology_key) != (stored.strategy, stored.topology_key) else {}
    event = PoolAccessChanged(pool=wanted.name, namespaces=list(wanted.access_namespaces),
                              service_accounts=list(wanted.access_service_accounts),
                              groups=list(wanted.access_groups), at=now, **scheduling)
    access = (wanted.access_namespaces, wanted.access_service_accounts, wanted.access_groups,
              *scheduling.values())
    return Append(subjects.pool(wanted.name), event, "access:" + _digest(access),
                  ok({"pool": wanted.name, "changed": True}))


def decide_delete(state: State, cmd: DeletePool, now: float) -> Outcome:
    """A pool whose devices hold allocations stays: deleting it would orphan running work."""
    if cmd.name not in state.pools:
        return fail("not-found", f"pool {cmd.name} does not exist", "name")
    held = allocations_in_pool(state, cmd.name)
    if held:
        shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
        return fail("conflict", f"pool {cmd.name} has {len(held)} active allocation(s) ({shown}); "
                    "release them before deleting the pool", "name")
    return Append(subjects.pool(cmd.name), PoolDeleted(pool=cmd.name, at=now), "delete",
                  ok({"pool": cmd.name, "deleted": True}))


def decide_fleet_defaults(state: State, cmd: SetFleetDefaults, now: float) -> Outcome:
    """The fleet's defaults (the schema bounds them: a cap of 0 to 1,000); setting what is set
    already is a no-op. A lower cap evicts nothing: nodes over it take no claim until under it."""
    if cmd.max_claims_per_node == state.fleet_max_claims:
        return ok(fleet_defaults(state) | {"changed": False})
    event = FleetDefaultsSet(max_claims_per_node=cmd.max_claims_per_node, at=now)
    after = fleet_defaults(state) | {"max_claims_per_node": cmd.max_claims_per_node, "changed": True}
    return Append(subjects.FLEET_DEFAULTS, event, f"defaults:{cmd.max_claims_per_node}", ok(after))


def fleet_defaults(state: State) -> dict:
    """The fleet's defaults as `gpuledger pool defaults` shows them (0: not set)."""
    return {"max_claims_per_node": state.fleet_max_claims}


def decide_ignore(state: State, cmd: IgnoreDevice, now: float, by: str = "") -> Outcome:
    """Seed 004's Ignored: an operator takes a device out of service, or gives it back. Running
    work on it is not evicted (like a cordon): it ends as usual, and nothing new lands there."""
    node = state.nodes.get(cmd.node)
    if node is None:
        return fail("not-found", f"node {cmd.node} is not registered", "node")
    unit = _device_on(node, cmd.device)
    if unit is None:
        known = ", ".join(_device_name(u) for u in node.units[:8])
        return fail("not-found", f"node {cmd.node} has no device {cmd.device!r} (UUID, <index> or "
                    f"<index>:<mig index>; it has {known})", "device")
    if (unit.uuid in state.ignored) == cmd.ignored:
        return ok({"node": cmd.node, "uuid": unit.uuid, "ignored": cmd.ignored, "changed": False})
    event = DeviceIgnoreChanged(node=cmd.node, uuid=unit.uuid, ignored=cmd.ignored,
                                reason=cmd.reason, by=by, at=now)
    return Append(subjects.device_marks(cmd.node), event, f"ignore:{unit.uuid}:{cmd.ignored}",
                  ok({"node": cmd.node, "uuid": unit.uuid, "ignored": cmd.ignored, "changed": True}))


def _device_on(node, device: str):
    for unit in node.units:
        if device in (unit.uuid, _device_name(unit)):
            return unit
    return None


def _device_name(unit) -> str:
    return f"{unit.index}:{unit.mig_index}" if unit.mig_index >= 0 else str(unit.index)


def _invalid(problems) -> Reply:
    return fail("invalid", "; ".join(str(p) for p in problems), f"pool.{problems[0].field}")


def _digest(value) -> str:
    return hashlib.sha256(msgspec.json.encode(value)).hexdigest()[:16]
