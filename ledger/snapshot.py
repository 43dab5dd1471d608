"""Snapshots of the projection: bytes out, state back, so a restart replays only the tail.

Pure: the caller stores the bytes (the allocator uses the NATS object store). The placement index
(groups) is derived, so it is not stored: nodes are re-indexed on load, in rank order, which
gives the same groups as the live state had.
"""

from __future__ import annotations

import msgspec

from schemas.lenient import convert_lenient
from schemas.types import PoolSpec, QuotaSpec
from schemas.upcast import current, upcast

from ledger.evolve import refresh_bound, refresh_typical
from ledger.holdings import requeue_all
from ledger.shapes import shape_key
from ledger.state import Claim, Node, State, Usage, milli_tflops, reindex_node

# 2: claim history as `trail` entries (was formatted lines); older ones are upgraded on read
SNAPSHOT_VERSION = 2
assert SNAPSHOT_VERSION == current("snapshot"), "a new snapshot version needs its step in schemas.upcast"


class Snapshot(msgspec.Struct):
    version: int
    last_seq: int
    last_decision_seq: int
    capacity_epoch: int
    next_rank: int
    submitted: int
    nodes: list[Node]
    claims: list[Claim]
    pending: list[str]
    leased: list[str]
    quotas: dict[str, QuotaSpec]
    usage: dict[str, Usage]
    pools: list[PoolSpec]
    # (gpus, milli, MIG profile, cpu, bound models) -> claims; four parts in older snapshots
    shape_counts: list[tuple[tuple, int]]
    shapes_seen: list[tuple[tuple, int]] = []
    ended: list[str] = []
    ignored: dict[str, str] = {}
    default_quota: QuotaSpec | None = None
    idle_watch: list[str] = []
    bound_seen: list[tuple[tuple, int]] = []  # absent before bound shapes were counted
    fleet_max_claims: int = 0  # the fleet's default cap of live claims per node (session 34)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Snapshot)


LIVE = ("pending", "allocated", "bound")


def to_snapshot(state: State, compact: bool = False) -> bytes:
    """The state as bytes. `compact` leaves ended claims out (keeping their ids), so the snapshot
    grows with live claims rather than with the log; the claim service and the read models still
    answer for ended claims from the log."""
    if state.ends_deferred:  # a catch-up's state is the log's fold only once it ends (DoomedClaim)
        raise ValueError("no snapshot of a catch-up before it ends")
    claims = list(state.claims.values())
    ended = list(state.ended)
    if compact:
        ended += [c.claim_id for c in claims if c.status not in LIVE]
        claims = [c for c in claims if c.status in LIVE]
    views = [(node, node.view, node.static) for node in state.nodes.values()]
    for node, _, _ in views:  # derived: not stored
        node.view = node.static = None
    try:
        return _encoder.encode(Snapshot(
            SNAPSHOT_VERSION, state.last_seq, state.last_decision_seq, state.capacity_epoch,
            state.next_rank, state.submitted, list(state.nodes.values()), claims,
            list(state.pending), list(state.leased), state.quotas, state.usage,
            list(state.pools.values()), list(state.shape_counts.items()),
            list(state.shapes_seen.items()), ended, dict(state.ignored),
            default_quota=state.default_quota, idle_watch=list(state.idle_watch),
            bound_seen=list(state.bound_seen.items()), fleet_max_claims=state.fleet_max_claims))
    finally:
        for node, view, static in views:
            node.view, node.static = view, static


def decode_snapshot(data: bytes) -> Snapshot:
    """The snapshot in the current version: an older one is upgraded by its registered steps
    (schemas.upcast), not refused; one newer than this code, or not a snapshot, raises ValueError.
    A snapshot holding a claim accepted before today's bounds is read without them
    (schemas.lenient), as the stored events it was folded from are."""
    try:
        snap = _decoder.decode(data)
        if snap.version == SNAPSHOT_VERSION:
            return snap
    except msgspec.ValidationError:
        pass  # an older shape the current type cannot read: the steps can
    raw = msgspec.msgpack.decode(data)
    if not isinstance(raw, dict) or not isinstance(raw.get("version"), int):
        raise ValueError("not a gpuledger snapshot (no integer `version`)")
    raw = upcast("snapshot", raw, raw["version"], field="version")
    try:
        return msgspec.convert(raw, Snapshot)
    except msgspec.ValidationError:
        return convert_lenient(raw, Snapshot)


def from_snapshot(data: bytes) -> State:
    snap = decode_snapshot(data)
    state = State(last_seq=snap.last_seq, last_decision_seq=snap.last_decision_seq,
                  capacity_epoch=snap.capacity_epoch, next_rank=snap.next_rank,
                  submitted=snap.submitted, quotas=dict(snap.quotas), usage=dict(snap.usage),
                  default_quota=snap.default_quota, fleet_max_claims=snap.fleet_max_claims)
    state.pools = {p.name: p for p in snap.pools}
    state.shape_counts = {shape_key(k): v for k, v in snap.shape_counts}
    refresh_typical(state, {shape_key(k): v for k, v in snap.shapes_seen})
    refresh_bound(state, {shape_key(k): v for k, v in snap.bound_seen})
    state.claims = {c.spec.claim_id: c for c in snap.claims}
    for claim in snap.claims:  # the milli sums are derived, not trusted from the bytes (older ones lack them)
        claim.tflops_m, claim.limit_tflops_m = milli_tflops(claim.tflops), milli_tflops(claim.limit_tflops)
    for usage in state.usage.values():
        usage.tflops_m, usage.limit_tflops_m = milli_tflops(usage.tflops), milli_tflops(usage.limit_tflops)
    state.ended = dict.fromkeys(snap.ended)
    state.ignored = dict(snap.ignored)
    state.pending = dict.fromkeys(snap.pending)
    requeue_all(state)
    state.leased = dict.fromkeys(snap.leased)
    state.idle_watch = dict.fromkeys(snap.idle_watch)
    state.holding = {c.spec.claim_id: None for c in snap.claims if c.holds_devices}
    state.min_priority = min((c.spec.priority for c in snap.claims), default=None)  # still a bound
    for node in sorted(snap.nodes, key=lambda n: n.rank):
        state.nodes[node.name] = node
        for unit in node.units:
            state.units[unit.uuid] = unit
        reindex_node(state, node)
    return state
