"""Commands (imperative) and their replies, sent by request/reply on `gpu.cmd.*`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from schemas.outcomes import STATUSES
from schemas.types import ClaimSpec, ClaimsPerNode, EndpointSpec, PoolSpec, Text
from schemas.wording import bounded, bounded_field


class Command(msgspec.Struct, gc=False, kw_only=True, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    pass


class Query(Command):
    """A query without arguments (status, summary)."""


class SubmitClaim(Command):
    claim: ClaimSpec
    wait_seconds: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 0.0


class ReleaseClaim(Command):
    claim_id: str
    reason: Text = "released by holder"  # stored in the log: bounded


class RenewLease(Command):
    claim_id: str


class ReportActivity(Command):
    claim_id: str


class GetClaim(Command):
    claim_id: str


class ListClaims(Command):
    """The newest `limit` claims (newest last), one page: a reply with `next` has more, older ones;
    send it back as `cursor` for them. Every page stays under the message limit (a page may hold
    fewer than `limit` claims to do so)."""

    namespace: str = ""
    # one of the statuses, or "" for all (a misspelt one answered an empty list, as if none had it)
    status: Literal[("", *STATUSES)] = ""
    limit: Annotated[int, msgspec.Meta(ge=1, le=100000)] = 1000
    cursor: Annotated[str, msgspec.Meta(max_length=128, pattern=r"^([A-Za-z0-9][A-Za-z0-9._:-]*)?$")] = ""


class SetQuota(Command):
    """Quantities as people write them: vram '100Gi', tflops '1000' or 1000."""

    namespace: str
    requests_tflops: str | float | None = None
    requests_vram: str | None = None
    limits_tflops: str | float | None = None
    limits_vram: str | None = None
    max_workers: int | None = None
    max_waiting: int | None = None  # most claims waiting at once (None: no limit)
    alert_threshold_percent: float = 95.0
    single_max_requests_tflops: str | float | None = None
    single_max_requests_vram: str | None = None
    single_max_limits_tflops: str | float | None = None
    single_max_limits_vram: str | None = None
    single_max_gpu_count: int | None = None
    parent: str = ""
    borrowing_limit_tflops: str | float | None = None
    borrowing_limit_vram: str | None = None
    lending_limit_tflops: str | float | None = None  # None: all of its unused quota may be lent
    lending_limit_vram: str | None = None
    fair_sharing_weight: float = 1.0  # a larger weight gets a larger share of what siblings borrow
    # its claims' priority may evict other namespaces' claims (default: priority counts within it only)
    preempt_other_namespaces: bool = False


class ApplyQuotas(Command):
    """Several quotas at once (a manifest): validated together against the log, parents before
    children; nothing is stored if any is invalid; one that equals the stored quota is unchanged."""

    quotas: Annotated[list[SetQuota], msgspec.Meta(min_length=1, max_length=1000)]
    dry_run: bool = False


class SetDefaultQuota(Command):
    """The quota of every namespace without one of its own; the same quantities as SetQuota."""

    requests_tflops: str | float | None = None
    requests_vram: str | None = None
    limits_tflops: str | float | None = None
    limits_vram: str | None = None
    max_workers: int | None = None
    max_waiting: int | None = None  # most claims waiting at once (None: no limit)
    alert_threshold_percent: float = 95.0
    single_max_requests_tflops: str | float | None = None
    single_max_requests_vram: str | None = None
    single_max_limits_tflops: str | float | None = None
    single_max_limits_vram: str | None = None
    single_max_gpu_count: int | None = None
    # every namespace without a quota of its own may then evict other namespaces' claims by priority
    preempt_other_namespaces: bool = False


class DeleteQuota(Command):
    namespace: str


class GetQuota(Command):
    namespace: str


class ListQuotas(Command):
    parent: str = ""  # only the children of this team/cohort


class GetQuotaStatus(Command):
    """Status (use, conditions, borrowing) of one namespace, or of all when empty, plus drift."""

    namespace: str = ""


class CreatePool(Command):
    pool: PoolSpec


class UpdatePool(Command):
    """Only access may change; any other field differing from the stored pool is refused."""

    pool: PoolSpec


class DeletePool(Command):
    name: str


class GetPool(Command):
    name: str


class ListPools(Command):
    pass


class SetFleetDefaults(Command):
    """The fleet's defaults, all at once (each set replaces the last): `max_claims_per_node` is
    the cap of live claims of every node that neither its label nor a pool sets (0: the built-in
    110 + 10 per device; ledger/node_claims.py)."""

    max_claims_per_node: ClaimsPerNode = 0


class IgnoreDevice(Command):
    """Mark a device Ignored (out of service, seed 004) or, with ignored=false, give it back.
    `device` is the UUID, or `<index>` / `<index>:<mig index>` on the node."""

    node: str
    device: str
    ignored: bool = True
    reason: Text = ""  # stored in the log: bounded


class RenderPool(Command):
    """The cluster objects a pool needs (device-plugin / MIG manager config, DRA objects)."""

    name: str
    namespace: str = "gpuledger"  # where the device-plugin and MIG manager ConfigMaps go
    claim_namespaces: list[str] = []  # DRA: ResourceClaimTemplates here (default: the pool's access)
    k8s_version: str = ""  # DRA API version to render for (default: the controller's)


class CreateEndpoint(Command):
    endpoint: EndpointSpec


class UpdateEndpoint(Command):
    """Replace an endpoint's spec (same name); a live endpoint's image cannot change."""

    endpoint: EndpointSpec


class DeleteEndpoint(Command):
    name: str


class GetEndpoint(Command):
    name: str


class ListEndpoints(Command):
    namespace: str = ""


class ReportEndpointLoad(Command):
    name: str
    queued: int
    oldest_wait_s: float = 0.0
    requests_per_min: float = 0.0


REQUEST_ID = r"^([A-Za-z0-9][A-Za-z0-9_-]*)?$"  # a subject-safe token (it names a msg id)


class AcquireSlot(Command):
    """A request for a model (Helix seed 002): a warm slot with room, else a new slot."""

    model: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    lora: Annotated[str, msgspec.Meta(max_length=1024)] = ""  # LoRA adapter; "" for the base model
    namespace: Annotated[str, msgspec.Meta(min_length=1, max_length=63)] = "default"
    # the caller's id for this request (idempotent: a retried acquire with the same id counts once);
    # empty: the service makes one and returns it
    request_id: Annotated[str, msgspec.Meta(max_length=128, pattern=REQUEST_ID)] = ""


class FinishSlotRequest(Command):
    """A request on a slot finished: its concurrency is free again. Without `request_id`, the
    oldest request running on the slot."""

    slot_id: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    request_id: Annotated[str, msgspec.Meta(max_length=128, pattern=REQUEST_ID)] = ""


class ListSlots(Command):
    model: str = ""


class CleanupSlots(Command):
    """Release stale slots now (the timer does it too); 0 or less: the configured stale limit."""

    stale_after_s: float = 0.0


class ErrorDetail(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    code: str  # invalid | not-found | conflict | unavailable | internal
    message: str
    field: str = ""


class Reply(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    ok: bool
    data: Any = None
    error: ErrorDetail | None = None
    next: str = ""  # a listing with more: pass it back as `cursor` for the next page


def ok(data: Any = None) -> Reply:
    return Reply(ok=True, data=data)


def fail(code: str, message: str, field: str = "") -> Reply:
    # bounded: a refusal quoting a value near the max payload would never be answered (wording.py)
    return Reply(ok=False, error=ErrorDetail(code=code, message=bounded(message), field=bounded_field(field)))
