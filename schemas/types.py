"""Value types shared by events and commands (msgspec Structs, JSON on the wire)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from schemas.catalogue import CUDA_VERSIONS, GROUP_CHOICES, MIG_PROFILES, MODEL_NAMES

# `(?!\n)$`, not `$`: Python's `$` also matches before a final newline ("a\n" would pass here and
# in Python's jsonschema, but not in JavaScript); the lookahead makes every engine agree.
Name = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?(?!\n)$",
                                   description="lower-case DNS-like name")]
ClaimId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}(?!\n)$",
                                      description="client-chosen id; letters, digits, . _ : -")]
# A name that may be left out ("" = none): a pool or an endpoint the claim names.
OptionalName = Annotated[str, msgspec.Meta(pattern=r"^([a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?)?(?!\n)$",
                                           max_length=63, description="empty, or a lower-case DNS-like name")]
GangId = Annotated[str, msgspec.Meta(pattern=r"^([A-Za-z0-9][A-Za-z0-9._:-]{0,127})?(?!\n)$", max_length=128,
                                     description="empty, or an id; letters, digits, . _ : -")]
# system:serviceaccount:<namespace>:<name>, or <namespace>:<name>; no blanks or control characters
ServiceAccount = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9._:-]*(?!\n)$", max_length=512,
                                             description="empty, or [system:serviceaccount:]<namespace>:<name>")]


# Choices and size limits of what a publisher sends. They are the one rule for both sides: msgspec
# enforces them when the intake decodes a claim, and the JSON Schema in schemas/json is generated
# from these same annotations. Nothing unbounded reaches the log, which can never delete it.
MAX_TEXT = 1024  # free text (workload)
MAX_KEY = 253  # a label or node-selector key: a Kubernetes qualified name with its DNS prefix
MAX_VALUE = 256
MAX_ENTRIES = 64  # labels, node selector
# Numbers too: far above any real claim, far below where arithmetic on them overflows (a claim
# with limit_vram_gib 1e307 crashed every allocator, issue 16). A claim has at most 64 GPUs.
MAX_GPU_MEMORY_GIB = 4096  # per GPU
MAX_TOTAL_GIB = 64 * MAX_GPU_MEMORY_GIB  # model memory, a VRAM limit: 64 GPUs' worth
MAX_GPU_TFLOPS = 100_000  # per GPU
MAX_TOTAL_TFLOPS = 64 * MAX_GPU_TFLOPS
MAX_LEASE_S = 366 * 24 * 3600  # a lease renewed less than once a year is no lease
MAX_CPU_MILLI = 1 << 30  # a million cores
MAX_MEMORY_MIB = 1 << 40  # an exbibyte
MAX_WORKERS = 10_000  # an endpoint's workers (each a claim)
MAX_SCALER_VALUE = 1_000_000  # seconds of queue delay, or requests per minute per worker
MAX_PRIORITY = 1000

ModelName = Literal[MODEL_NAMES]
GroupName = Literal[GROUP_CHOICES]
CudaVersion = Literal[CUDA_VERSIONS]
# "" is the same as leaving it out (encoders in other languages often write every field)
MigProfile = Literal[("",) + MIG_PROFILES]
# seed 001's placement policy of a claim; "" and "any" prefer one NVLink island, "contiguous" requires it
PLACEMENT_POLICIES = ("", "any", "contiguous")
PlacementPolicy = Literal[PLACEMENT_POLICIES]
Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]
# What counts as blank, spelt out: `\s` differs between engines (Python's takes \x1c-\x1f and \x85,
# JavaScript's \ufeff), so a key of one of those passed one side and not the other. This class is
# every character either engine calls whitespace; both read it the same.
BLANK = r"\t-\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
SelectorKey = Annotated[str, msgspec.Meta(max_length=MAX_KEY, pattern=rf"[^{BLANK}]",
                                          description="a key, not empty or blank")]
LabelKey = Annotated[str, msgspec.Meta(max_length=MAX_KEY)]
LabelValue = Annotated[str, msgspec.Meta(max_length=MAX_VALUE)]
Labels = Annotated[dict[LabelKey, LabelValue], msgspec.Meta(max_length=MAX_ENTRIES)]
NodeSelector = Annotated[dict[SelectorKey, LabelValue], msgspec.Meta(max_length=MAX_ENTRIES)]
Models = Annotated[list[ModelName], msgspec.Meta(max_length=len(MODEL_NAMES))]
Groups = Annotated[list[GroupName], msgspec.Meta(max_length=len(GROUP_CHOICES))]
CudaVersions = Annotated[list[CudaVersion], msgspec.Meta(max_length=len(CUDA_VERSIONS))]


class Reason(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    """One ranked reason why a claim waits, was refused, or was placed where it was."""

    code: str  # stable, machine-readable: quota-exceeded, no-free-gpu, gang-incomplete...
    message: str  # human sentence, e.g. "quota team-a vram: requested 80Gi, limit 64Gi"
    count: int = 0  # how many nodes/devices this reason applies to (ranking weight)
    detail: dict[str, str | int | float] = {}


class ClaimSpec(msgspec.Struct, gc=False, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """What a workload asks for. Exactly one shape: whole GPUs, a fraction, a MIG instance,
    a tensor-parallel memory need, or CPU only."""

    claim_id: ClaimId
    namespace: Name
    gpus: Annotated[int, msgspec.Meta(ge=0, le=64)] = 1
    gpu_milli: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 1000
    gpu_memory_gib: Annotated[float, msgspec.Meta(ge=0, le=MAX_GPU_MEMORY_GIB)] = 0.0
    model_memory_gib: Annotated[float, msgspec.Meta(ge=0, le=MAX_TOTAL_GIB)] = 0.0
    mig_profile: MigProfile = ""
    models: Models = []
    gpu_groups: Groups = []
    cuda_versions: CudaVersions = []
    pool: OptionalName = ""
    node_selector: NodeSelector = {}
    priority: Annotated[int, msgspec.Meta(ge=-MAX_PRIORITY, le=MAX_PRIORITY)] = 0
    gang_id: GangId = ""
    gang_size: Annotated[int, msgspec.Meta(ge=0, le=4096)] = 0
    lease_seconds: Annotated[float, msgspec.Meta(ge=0, le=MAX_LEASE_S)] = 0.0
    cpu_milli: Annotated[int, msgspec.Meta(ge=0, le=MAX_CPU_MILLI)] = 0
    memory_mib: Annotated[int, msgspec.Meta(ge=0, le=MAX_MEMORY_MIB)] = 0
    limit_tflops: Annotated[float, msgspec.Meta(ge=0, le=MAX_TOTAL_TFLOPS)] = 0.0
    limit_vram_gib: Annotated[float, msgspec.Meta(ge=0, le=MAX_TOTAL_GIB)] = 0.0
    # TFLOPS requested on each GPU (TensorFusion's tflops request): the allocator gives each GPU the
    # share of a card that provides it (with gpu_memory_gib: the larger of the two shares)
    gpu_tflops: Annotated[float, msgspec.Meta(ge=0, le=MAX_GPU_TFLOPS)] = 0.0
    workload: Text = ""
    endpoint: OptionalName = ""
    service_account: ServiceAccount = ""
    labels: Labels = {}
    # seed 001: "contiguous" = every GPU from one NVLink island or none; "" = preferred, not required
    policy: PlacementPolicy = ""


class DeviceInfo(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    """One allocatable unit as the node agent found it: a whole card or one MIG instance."""

    uuid: str
    index: int  # the card's NVML index (a MIG instance carries its parent card's index)
    model: str
    memory_mib: int
    product: str = ""
    mig_index: int = -1  # >= 0 for a MIG instance
    mig_profile: str = ""
    mig_enabled: bool = False  # a card in MIG mode: only its instances are allocatable
    island: int = 0  # NVLink island within the node
    health: str = "Healthy"  # Healthy | Faulted | Ignored
    # seed 001's names: "nvlink-group-<n>" for GPUs joined by NVLink, "pcie-<index>" for a card
    # alone; bandwidth in GB/s (both directions) of that link as NVML reports it, 0 when unknown
    island_name: str = ""
    bandwidth_gbps: float = 0.0
    pci_bus_id: str = ""
    pci_vendor: str = "10de"
    pci_device: str = ""


class DeviceUsage(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    uuid: str
    memory_used_mib: int = 0
    utilization_percent: int = 0
    pids: list[int] = []


class Grant(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    """One device (or share of one) granted to a claim."""

    node: str
    uuid: str
    index: int
    milli: int = 1000
    memory_mib: int = 0
    mig_index: int = -1


class Resources(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    """A TFLOPS and VRAM amount; None means no limit."""

    tflops: float | None = None
    vram_mib: int | None = None


class QuotaTotal(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    requests: Resources = Resources()
    limits: Resources = Resources()
    max_workers: int | None = None
    alert_threshold_percent: float = 95.0
    # most claims of the namespace waiting at once (None: no limit); one more that cannot be placed
    # when it is decided is rejected (`quota-waiting-exceeded`), not queued
    max_waiting: int | None = None


class QuotaSingle(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    max_requests: Resources = Resources()
    max_limits: Resources = Resources()
    max_gpu_count: int | None = None


class QuotaSpec(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    """A node of the quota tree: a namespace, or a cohort that namespaces and cohorts name as parent."""

    total: QuotaTotal = QuotaTotal()
    single: QuotaSingle = QuotaSingle()
    parent: str = ""  # a cohort/team quota whose unused share children may borrow
    borrowing_limit: Resources = Resources(tflops=0.0, vram_mib=0)  # how much it may borrow
    lending_limit: Resources = Resources()  # how much of its unused quota others may use (None: all)
    fair_sharing_weight: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 1.0  # Kueue fairSharing.weight
    # a claim's priority is its publisher's word: it orders and preempts within its namespace only,
    # unless an admin sets this (its claims may then evict lower-priority claims of any namespace
    # and use nodes held for them): services/allocator/core/priority_scope.py
    preempt_other_namespaces: bool = False


# A pool's lists and their entries (session 25: a 100,000-character inventory id and 20,000
# namespaces were stored as they came); far above any cluster's, small enough for one event.
PoolItem = Annotated[str, msgspec.Meta(max_length=512)]
PoolList = Annotated[list[PoolItem], msgspec.Meta(max_length=1024)]
MAX_DEVICES_PER_NODE = 1024
# The most live claims (or device grants) any node may hold: a node's cap, however it is set
# (its label, its pool, the fleet default: ledger/node_claims.py), is at most this.
MAX_CLAIMS_PER_NODE = 1000
# A cap of live claims per node as a pool or the fleet default sets it: 0 = not set here.
ClaimsPerNode = Annotated[int, msgspec.Meta(ge=0, le=MAX_CLAIMS_PER_NODE)]


class DeviceSelector(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    inventory_ids: PoolList = []
    products: PoolList = []
    pci_vendors: PoolList = []
    pci_devices: PoolList = []
    mig_capable: bool | None = None
    mig_profiles: PoolList = []


class PoolSpec(msgspec.Struct, gc=False, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """A GPU pool (Deckhouse-style). Everything but `access_namespaces` is immutable."""

    name: Name
    provider: str = "nvidia"
    backend: str = "device-plugin"  # device-plugin | dra
    unit: str = "Card"  # Card | MIG
    mig_profile: str = ""
    slices_per_unit: Annotated[int, msgspec.Meta(ge=1, le=64)] = 1
    # 0 = no limit; at most MAX_DEVICES_PER_NODE (10^23 was stored as it came, past what the
    # allocator's snapshot can write)
    max_devices_per_node: Annotated[int, msgspec.Meta(ge=0, le=MAX_DEVICES_PER_NODE)] = 0
    # the cap of live claims on each node with a device in the pool (0: not set; the lowest of a
    # node's pools applies, below its own label: ledger/node_claims.py); immutable like the rest
    max_claims_per_node: ClaimsPerNode = 0
    strategy: str = "BinPack"  # BinPack | Spread
    topology_key: PoolItem = ""
    include: DeviceSelector = DeviceSelector()
    exclude: DeviceSelector = DeviceSelector()
    node_selector: Annotated[dict[str, str], msgspec.Meta(max_length=MAX_ENTRIES)] = {}
    access_namespaces: PoolList = []  # empty: every namespace
    access_service_accounts: PoolList = []
    access_groups: PoolList = []
    resource: PoolItem = ""  # e.g. gpu.deckhouse.io/<name>


class EndpointSpec(msgspec.Struct, gc=False, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """A serverless endpoint: workers are claims that the autoscaler adds and removes."""

    name: Name
    namespace: Name
    gpu_groups: list[str] = msgspec.field(default_factory=lambda: ["any"])
    cuda_versions: list[str] = []
    gpus_per_worker: Annotated[int, msgspec.Meta(ge=1, le=8)] = 1
    # bounded like a claim's numbers: each worker is a claim with this priority, and a number past
    # 2^64 (stored as it came before session 25) could not be written in the allocator's snapshot
    workers_min: Annotated[int, msgspec.Meta(ge=0, le=MAX_WORKERS)] = 0
    workers_max: Annotated[int, msgspec.Meta(ge=1, le=MAX_WORKERS)] = 3
    scaler_type: str = "QUEUE_DELAY"  # QUEUE_DELAY | REQUEST_COUNT
    scaler_value: Annotated[int, msgspec.Meta(ge=1, le=MAX_SCALER_VALUE)] = 4
    idle_timeout_s: Annotated[float, msgspec.Meta(ge=0, le=MAX_LEASE_S)] = 5.0
    # the container image its workers run (a label of each worker claim, so a bound <= MAX_VALUE)
    image: Annotated[str, msgspec.Meta(max_length=MAX_VALUE)] = ""
    priority: Annotated[int, msgspec.Meta(ge=-MAX_PRIORITY, le=MAX_PRIORITY)] = 0
    # the seed's LiveServerless: workers run the operator's locked image (GPULEDGER_LIVE_IMAGE);
    # no create or update can set another
    live: bool = False
