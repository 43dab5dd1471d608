"""The event contract: every fact gpuledger knows is one of these, in one JetStream stream.

Rules (see docs/architecture.md): events are past tense and versioned by `v`; an additive change
adds a field with a default; a breaking change is a new version with a step in `schemas/upcast.py`
that upgrades the old payload on read; a published version is never edited. Times are unix seconds (float) supplied by the writer.
"""

from __future__ import annotations

import msgspec

from schemas import upcast as upcasts
from schemas.types import (
    ClaimSpec,
    ClaimsPerNode,
    DeviceInfo,
    DeviceUsage,
    EndpointSpec,
    Grant,
    PoolSpec,
    QuotaSpec,
    Reason,
)


class Event(msgspec.Struct, gc=False, tag_field="type", kw_only=True, frozen=True, omit_defaults=True):
    v: int = 1
    at: float = 0.0


# --- claim service -------------------------------------------------------------------------


class ClaimSubmitted(Event, tag=True):
    claim: ClaimSpec
    trace: dict[str, str] = {}  # W3C trace context of the submit, so the decision joins the trace
    # the publishing system it came from (schemas/systems.py: read from the subject it arrived on,
    # never from the payload); "" for ops and the shared `publisher` user. Only that system may
    # release, renew or report activity for it on its own subjects.
    system: str = ""


class ClaimRejected(Event, tag=True):
    """Intake refused the claim (invalid input); it never enters the queue."""

    claim_id: str
    code: str
    reasons: list[Reason] = []


class ClaimReleased(Event, tag=True):
    claim_id: str
    reason: str = "released by holder"
    by: str = ""


class LeaseRenewed(Event, tag=True):
    claim_id: str


class ClaimActivity(Event, tag=True):
    """The holder (or the node agent observing its processes) reports the claim in use."""

    claim_id: str


# --- node agent -------------------------------------------------------------------------------


class NodeRegistered(Event, tag=True):
    """A node's full inventory; a later registration replaces it (e.g. after a MIG re-layout)."""

    node: str
    devices: list[DeviceInfo]
    cpu_milli: int = 0
    memory_mib: int = 0
    labels: dict[str, str] = {}
    driver_version: str = ""
    cuda_version: str = ""
    simulated: bool = False


class NodeHeartbeat(Event, tag=True):
    node: str


class DeviceHealthChanged(Event, tag=True):
    node: str
    uuid: str
    health: str  # Healthy | Faulted | Ignored
    reason: str = ""


class NodeConditionChanged(Event, tag=True):
    node: str
    condition: str  # Ready | InfraDegraded | HasFaulted
    reason: str = ""


class UsageObserved(Event, tag=True):
    node: str
    devices: list[DeviceUsage]


class ClaimBound(Event, tag=True):
    """The node agent bound the allocation: the workload may start with this environment."""

    claim_id: str
    node: str
    env: dict[str, str]


# --- pool controller ---------------------------------------------------------------------------


class PoolCreated(Event, tag=True):
    pool: PoolSpec


class PoolAccessChanged(Event, tag=True):
    """The mutable part of a pool changed: its access and, since session 35, its scheduling
    (seed 004 makes only provider, backend, resource, allocation, deviceSelector and nodeSelector
    immutable). Everything else is immutable after creation."""

    pool: str
    namespaces: list[str]
    service_accounts: list[str] | None = None  # None: unchanged (events written before v1.1)
    groups: list[str] | None = None
    strategy: str | None = None  # None: unchanged (events written before session 35)
    topology_key: str | None = None


class PoolDeleted(Event, tag=True):
    pool: str


class FleetDefaultsSet(Event, tag=True):
    """The fleet's defaults (pool controller, on subjects.FLEET_DEFAULTS): each set replaces the
    last. `max_claims_per_node`: the cap of live claims of a node that neither its label nor a pool
    of its devices sets (0: the built-in formula; ledger/node_claims.py)."""

    max_claims_per_node: ClaimsPerNode = 0


class DeviceIgnoreChanged(Event, tag=True):
    """An operator takes a device out of service (Ignored, seed 004) or gives it back. The node
    agent never sets Ignored: its health reports are kept and apply again once un-ignored."""

    node: str
    uuid: str
    ignored: bool
    reason: str = ""
    by: str = ""


# --- quota service -----------------------------------------------------------------------------


class QuotaSet(Event, tag=True):
    namespace: str
    spec: QuotaSpec


class QuotaDeleted(Event, tag=True):
    namespace: str


class QuotaDefaultSet(Event, tag=True):
    """The quota of every namespace without one of its own (a namespace quota or a cohort): each
    such namespace is limited by this spec separately. No parent: defaulted namespaces stand alone."""

    spec: QuotaSpec


class QuotaDefaultDeleted(Event, tag=True):
    """Namespaces without a quota of their own are unlimited again."""


class QuotaAlertRaised(Event, tag=True):
    namespace: str
    resource: str
    used_percent: float
    threshold_percent: float


class QuotaAlertCleared(Event, tag=True):
    namespace: str
    resource: str
    used_percent: float
    threshold_percent: float


class DriftDetected(Event, tag=True):
    node: str
    kind: str  # unallocated-process | idle-allocation | missing-device
    uuid: str = ""
    claim_id: str = ""  # idle-allocation: the claim; unallocated-process: the claim it outlived, if any
    detail: str = ""
    pid: int = 0  # unallocated-process: the process (one report per process)


class DriftCleared(Event, tag=True):
    """A mismatch reported by `DriftDetected` is gone (the process ended, the device is busy again,
    the allocation ended)."""

    node: str
    kind: str
    uuid: str = ""
    claim_id: str = ""
    pid: int = 0


class ProcessKilled(Event, tag=True):
    """The node agent killed a process that no allocation holds, reported as drift for longer than
    the operator's grace period (GPULEDGER_KILL_UNALLOCATED_AFTER_S)."""

    node: str
    uuid: str
    pid: int
    claim_id: str = ""  # the claim whose allocation the process outlived, if known
    reason: str = ""
    detected_at: float = 0.0  # when the drift was first reported


class QuotaBorrowed(Event, tag=True):
    """A claim took its namespace above its own quota with the unused quota of its cohort.

    Stored in the same DecisionBatch as the ClaimAllocated it explains."""

    claim_id: str
    namespace: str  # the borrower
    parent: str  # the cohort it borrows from (the parent of the first node in `through`)
    lenders: list[str] = []  # siblings with unused quota (and the parent for its unassigned share)
    tflops: float = 0.0  # the part of the claim above the borrower's own quota
    vram_mib: int = 0
    through: list[str] = []  # the tree nodes this grant takes above their quota, nearest first


class QuotaReclaimed(Event, tag=True):
    """A lender took its quota back: the borrower's claim `claim_id` was evicted for `beneficiary`.

    Stored in the same DecisionBatch as the ClaimEvicted(rule="quota-reclaim") it explains."""

    claim_id: str
    borrower: str
    lender: str
    parent: str  # the nearest cohort the borrower and the lender share
    beneficiary: str = ""
    tflops: float = 0.0
    vram_mib: int = 0
    rule: str = "nominal"  # nominal: the lender is within its own quota | fair-share (see docs/quota.md)


# --- serverless endpoints (claim service) --------------------------------------------------------


class EndpointCreated(Event, tag=True):
    endpoint: EndpointSpec


class EndpointUpdated(Event, tag=True):
    """The endpoint's new spec (same name): workers added from now on use it."""

    endpoint: EndpointSpec


class EndpointDeleted(Event, tag=True):
    name: str


class EndpointLoadReported(Event, tag=True):
    """The endpoint's front end reports its queue: what the autoscaler decides on."""

    name: str
    queued: int
    oldest_wait_s: float = 0.0
    requests_per_min: float = 0.0


class EndpointScaled(Event, tag=True):
    name: str
    workers_before: int
    workers_after: int
    reason: str
    added: list[str] = []  # worker claim ids this step submits (their claims follow it)
    released: list[str] = []  # worker claim ids this step releases


# --- model slots (claim service): the requests running on each slot -----------------------------


class SlotRequestStarted(Event, tag=True):
    """A request went to a model slot (Helix seed 002): it takes one of the slot's concurrency.
    Appended fenced on the slot's subject, so two claim-service replicas never overfill a slot."""

    slot_id: str
    request_id: str


class SlotRequestFinished(Event, tag=True):
    """The request's concurrency is free again: it finished, or ran past the request timeout
    (`timeout`), or its slot ended (`slot-ended`)."""

    slot_id: str
    request_id: str
    reason: str = "finished"


# --- allocator decisions (always inside a DecisionBatch on the fenced decision subject) ----------


class ClaimAllocated(Event, tag=True):
    claim_id: str
    namespace: str
    node: str
    grants: list[Grant] = []
    tflops: float = 0.0
    vram_mib: int = 0
    limit_tflops: float = 0.0
    limit_vram_mib: int = 0
    borrowed_from: str = ""  # parent quota lent to this namespace
    policy: str = ""
    explain: list[str] = []  # why this placement (top scores, NVLink island)


class ClaimPending(Event, tag=True):
    claim_id: str
    reasons: list[Reason]


class AllocationRejected(Event, tag=True):
    """The claim can never be satisfied as asked (per-workload quota, unknown pool...)."""

    claim_id: str
    code: str
    reasons: list[Reason]


class ClaimEvicted(Event, tag=True):
    claim_id: str
    rule: str  # stale | priority | quota-reclaim | fair-share
    beneficiary: str = ""
    detail: str = ""


class AllocationExpired(Event, tag=True):
    claim_id: str
    last_renewed: float  # the claim service's time of the last renewal (or the allocation's)
    # the deciding allocator's time of hearing that renewal (or allocation), which the lease is
    # judged by (services/allocator/core/heard.py); 0: judged by `last_renewed` (before session 31)
    heard_at: float = 0.0


class AllocationUnused(Event, tag=True):
    """The allocator released an allocation on which its node agent showed no process (and no
    utilisation) for longer than the grace period: usage rebuilt from what runs (seed 003)."""

    claim_id: str
    idle_since: float  # the allocation, or the last report of a process on its devices
    observed_at: float  # the node agent's latest report that showed its devices idle
    grace_s: float
    reason: str = ""


class NodeLost(Event, tag=True):
    """A silent node is lost (out of placement) and the claims it held are released. `released`
    names them. A node holding more claims than one batch may name is lost once and releases them
    over several NodeLost (services/allocator/core/timers.py): each but the last has `partial`
    set and frees only the claims it names; one without it (every NodeLost before session 30)
    frees every claim the node still holds, which it names."""

    node: str
    last_heartbeat: float  # the node agent's time of its last heartbeat (its own clock)
    released: list[str] = []
    partial: bool = False
    # the deciding allocator's time of hearing the node last, which silence is judged by
    # (services/allocator/core/heard.py); 0: judged by `last_heartbeat` (before session 31)
    heard_at: float = 0.0


class ClaimEnding(Event, tag=True):
    """The allocator is about to end this claim, allocated and not yet bound, by a decision on
    the decision subject (`decision`: ClaimEvicted, AllocationExpired, AllocationUnused or
    NodeLost). Appended on its node's ending subject (`gpu.evt.fence.<node>.ending`, which only
    the allocator may write; sessions 21-24 on `gpu.evt.ending.<claim>`, still believed there;
    before session 21 on the claim's own subject, where folds now drop it)
    just before that `DecisionBatch`, it moves the subjects a node agent's binding is conditioned
    on, so no binding is stored after the decision (issue 16). No fold of the ledger changes
    state on it; the allocator leaves the claim out of node records until its batch is folded. `fence` is the decision subject's last sequence the
    batch is appended on condition of: the first batch after it is this one, or another
    allocator's that fenced it out (then the claim stays live and may be bound)."""

    claim_id: str
    decision: str
    fence: int
    node: str = ""


class DecisionBatch(Event, tag=True):
    """One fenced append of the allocator: several decisions, a gang always in one batch."""

    decisions: list[
        ClaimAllocated | ClaimPending | AllocationRejected | ClaimEvicted | AllocationExpired | NodeLost
        | QuotaBorrowed | QuotaReclaimed | AllocationUnused
    ]
    allocator: str = ""
    policy_version: str = ""
    based_on_seq: int = 0


# What an EventBatch may carry: the facts writers other than the allocator append. Decisions stay
# in DecisionBatch on the fenced decision subject; a batch never nests.
BatchableEvent = (
    ClaimSubmitted
    | ClaimRejected
    | ClaimReleased
    | LeaseRenewed
    | ClaimActivity
    | NodeHeartbeat
    | DeviceHealthChanged
    | NodeConditionChanged
    | UsageObserved
    | ClaimBound
    | DriftDetected
    | DriftCleared
    | EndpointLoadReported
)


class EventBatch(Event, tag=True):
    """Several events one writer appends as one message (the claim service's drained intake, a
    node agent's bindings of one decision batch): read and folded member by member, in order, as
    if each had been appended on its own. Use `schemas.events.flatten` to read one."""

    events: list[BatchableEvent]


AnyEvent = (
    ClaimSubmitted
    | ClaimRejected
    | ClaimReleased
    | LeaseRenewed
    | ClaimActivity
    | ClaimEnding
    | NodeRegistered
    | NodeHeartbeat
    | DeviceHealthChanged
    | NodeConditionChanged
    | UsageObserved
    | ClaimBound
    | ProcessKilled
    | PoolCreated
    | PoolAccessChanged
    | PoolDeleted
    | FleetDefaultsSet
    | DeviceIgnoreChanged
    | QuotaSet
    | QuotaDeleted
    | QuotaDefaultSet
    | QuotaDefaultDeleted
    | QuotaAlertRaised
    | QuotaAlertCleared
    | DriftDetected
    | DriftCleared
    | QuotaBorrowed
    | QuotaReclaimed
    | EndpointCreated
    | EndpointUpdated
    | EndpointDeleted
    | EndpointLoadReported
    | EndpointScaled
    | SlotRequestStarted
    | SlotRequestFinished
    | DecisionBatch
    | EventBatch
    | ClaimAllocated
    | ClaimPending
    | AllocationRejected
    | ClaimEvicted
    | AllocationExpired
    | AllocationUnused
    | NodeLost
)

DECISION_TYPES = (ClaimAllocated, ClaimPending, AllocationRejected, ClaimEvicted, AllocationExpired, NodeLost,
                  QuotaBorrowed, QuotaReclaimed, AllocationUnused)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AnyEvent)


def encode_event(event: Event) -> bytes:
    return _encoder.encode(event)


def decode_event(data: bytes) -> Event:
    """One stored event in its current version: events of a type that has upcasters (an older `v`,
    also as a batch's member) are upgraded on read by schemas.upcast's steps."""
    if not upcasts.EVENT_KINDS:  # no event type has ever changed version: the direct decode
        return _decoder.decode(data)
    return msgspec.convert(_upcast_raw(msgspec.json.decode(data)), AnyEvent)


def event_decoder():
    """`decode_event` for a loop over many stored messages (a catch-up): the strict decoder's own
    method while no event type has upcasters, the same result without a Python call around each
    message; `decode_event` itself once one has."""
    return _decoder.decode if not upcasts.EVENT_KINDS else decode_event


def _upcast_raw(raw):
    if not isinstance(raw, dict):
        return raw
    kind, version = raw.get("type"), raw.get("v", 1)
    if kind in upcasts.EVENT_KINDS and isinstance(version, int) and version != upcasts.EVENT_KINDS[kind]:
        raw = upcasts.upcast(kind, raw, version)
    for members in ("events", "decisions"):  # a batch's members keep their own versions
        if isinstance(raw.get(members), list):
            raw = {**raw, members: [_upcast_raw(member) for member in raw[members]]}
    return raw


def flatten(event: Event) -> list[Event]:
    """The events a message carries: an EventBatch's members in order, else the event itself."""
    return list(event.events) if isinstance(event, EventBatch) else [event]
