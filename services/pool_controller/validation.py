"""Pool rules of the GPUPool seed (004), pure: a spec and the cluster's facts in, problems out.

Each rule is a small function returning the problems it finds as `FieldError(field, message)`;
`validate_pool` runs them all so one answer lists every problem, the first one naming the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from schemas.catalogue import CATALOGUE
from schemas.types import DeviceSelector, PoolSpec

PROVIDERS = ("nvidia",)
BACKENDS = ("device-plugin", "dra")
UNITS = ("Card", "MIG")
STRATEGIES = ("BinPack", "Spread")
DRA_MIN_VERSION = (1, 32)
# MIG profiles the catalogue's cards are statically sliced into: the only ones DRA can hand out.
STATIC_MIG_PROFILES: frozenset[str] = frozenset(p for m in CATALOGUE for p in m.mig_profiles)
MIG_PROFILE = re.compile(r"^[1-7]g\.\d{1,3}gb\Z")
PCI_ID = re.compile(r"^[0-9a-f]{4}\Z")
# `\Z`, not `$`: Python's `$` also matches before a final newline ("team-a\n" was a namespace)
_LABEL_NAME = r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_DNS_PREFIX = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
LABEL_KEY = re.compile(rf"^({_DNS_PREFIX}/)?{_LABEL_NAME}\Z")
LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?\Z")
NAMESPACE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
SERVICE_ACCOUNT = re.compile(r"^(system:serviceaccount:)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?:"
                             r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?\Z")
MPS_REASON = ("MPS is not supported: it gives no isolation, needs hostIPC and a shared UID, and "
              "limits the number of clients; oversubscribe with slices_per_unit (time slicing) "
              "on the device-plugin backend instead")
# Fields that may change after creation. Seed 004 makes `resource`, `allocation` (mode,
# migProfile, slicesPerUnit, maxDevicesPerNode), `deviceSelector`, `nodeSelector`, `backend` and
# `provider` immutable; access and scheduling (strategy, topologyKey) may change, as the CRD's
# transition rules allow. `max_claims_per_node` is part of `allocation` here.
MUTABLE_FIELDS = ("access_namespaces", "access_service_accounts", "access_groups", "strategy", "topology_key")


@dataclass(frozen=True)
class ClusterFacts:
    """What the cluster offers; `backend: dra` needs Kubernetes >= 1.32 with DRA enabled."""

    k8s_version: str = ""
    dra_enabled: bool = False


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def validate_pool(pool: PoolSpec, facts: ClusterFacts) -> list[FieldError]:
    """Every rule a new pool must satisfy; empty when the pool is valid."""
    problems: list[FieldError] = []
    for rule in (_provider, _backend, _unit, _slices, _dra, _strategy, _limits, _resource,
                 _node_selector, _access):
        problems += rule(pool, facts)
    problems += _selector(pool.include, "include")
    problems += _selector(pool.exclude, "exclude")
    problems += _overlap(pool.include, pool.exclude)
    return problems


def immutable_changes(stored: PoolSpec, wanted: PoolSpec) -> list[str]:
    """Names of the fields an update would change beyond access (the seed makes them immutable)."""
    return [name for name in stored.__struct_fields__
            if name not in MUTABLE_FIELDS and getattr(stored, name) != getattr(wanted, name)]


def validate_access(pool: PoolSpec) -> list[FieldError]:
    """The rules an update must satisfy: access and scheduling, the parts of a pool that may change."""
    return _access(pool, ClusterFacts()) + _strategy(pool, ClusterFacts())


def parse_version(version: str) -> tuple[int, int] | None:
    """'v1.32.3' / '1.32' / '1.32+' -> (1, 32); None when it is not a version."""
    match = re.match(r"^v?(\d+)\.(\d+)", version.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


# --- the rules -------------------------------------------------------------------------------


def _provider(pool: PoolSpec, facts: ClusterFacts) -> list[FieldError]:
    if pool.provider not in PROVIDERS:
        return [FieldError("provider", f"{pool.provider!r} is not supported; only 'nvidia' is")]
    return []


def _backend(pool: PoolSpec, facts: ClusterFacts) -> list[FieldError]:
    if pool.backend not in BACKENDS:
        return [FieldError("backend", f"{pool.backend!r} is not one of {', '.join(BACKENDS)}")]
    return []


def _unit(pool: PoolSpec, facts: ClusterFacts) -> list[FieldError]:
    if pool.unit.upper() == "MPS":
        return [FieldError("unit", MPS_REASON)]
    if pool.unit not in UNITS:
        return [FieldError("unit", f"{pool.unit!r} is not one of {', '.join(UNITS)}")]
    if pool.unit == "Card" and pool.mig_profile:
        return [FieldError("mig_profile", "only a pool with unit MIG has a MIG profile")]
    if pool.mig_profile and not MIG_PROFILE.match(pool.mig_profile):
        return [FieldError("mig_profile", f"{pool.mig_profile!r} is not a MIG profile name "
                           "like '1g.10gb'")]
    if pool.mig_profile and pool.mig_profile not in STATIC_MIG_PROFILES:
        return [FieldError("mig_profile", f"{pool.mig_profile!r} is not a profile of any known GPU "
                           f"(known: {', '.join(sorted(STATIC_MIG_PROFILES))})")]
    return []


def _slices(pool: PoolSpec, facts: ClusterFacts) -> list[FieldError]:
    if not 1 <= pool.slices_per_unit <= 64:
        return [FieldError("slices_per_unit", f"{pool.slices_per_unit} is outside 1..64")]
    return []


def _dra(pool: PoolSpec, facts: ClusterFacts) -> list[FieldError]:
    """DRA: a recent cluster, no oversubscription, only statically sliced MIG on capable cards."""
    if pool.backend != "dra":
        return []
    problems = []
    version = parse_version(facts.k8s_version)
    if version is None:
        problems.append(FieldError("backend", "dra needs Kubernetes >= 1.32 and the cluster version "
                                   "is unknown (set GPULEDGER_K8S_VERSION)"))
    elif version < DRA_MIN_VERSION:
        problems.append(FieldError("backend", f"dra needs Kubernetes >= 1.32, the cluster runs "
                                   f"{facts.k8s_version}"))
    if not facts.dra_enabled:
        problems.append(FieldError("backend", "dra needs the DynamicResourceAllocation feature, "
                                   "which the cluster does not enable (GPULEDGER_DRA_ENABLED)"))
    if pool.slices_per_unit != 1:
        problems.append(FieldError("slices_per_unit", "must be 1 with backend dra: the DRA driver "
                                   "cannot oversubscribe (time slicing needs device-plugin)"))
    if pool.unit == "MIG":
        problems += _dra_mig(pool)
    return problems


def _dra_mig(pool: PoolSpec) -> list[FieldError]:
    problems = []
    if pool.include.mig_capable is not True:
        problems.append(FieldError("include.mig_capable", "must be true for a MIG pool on dra: "
                                   "DRA only serves statically sliced MIG on MIG-capable cards"))
    if not pool.mig_profile:
        problems.append(FieldError("mig_profile", "a MIG pool on dra needs a static MIG profile "
                                   "(DRA cannot slice dynamically)"))
    return problems


def _strategy(pool: PoolSpec, facts: ClusterFacts) -> list[FieldError]:
    if pool.strategy not in STRATEGIES:
        return [FieldError("strategy", f"{pool.strategy!r} is not one of {', '.join(STRATEGIES)}")]
    if pool.topology_key and not LABEL_KEY.match(pool.topology_key):
        return [FieldError("topology_key", f"{pool.topology_key!r} is not a label key")]
    return []


def _limits(pool: PoolSpec, facts: ClusterFacts) -> list[FieldError]:
    if pool.max_devices_per_node < 0:
        return [FieldError("max_devices_per_node", "must be 0 (no limit) or more")]
    return []


def _resource(pool: PoolSpec, facts: ClusterFacts) -> list[FieldError]:
    if not pool.resource:
        return []
    if pool.resource.count("/") != 1 or not LABEL_KEY.match(pool.resource):
        return [FieldError("resource", f"{pool.resource!r} is not an extended resource name "
                           "with a domain, like 'gpu.gpuledger.io/<pool>'")]
    return []


def _node_selector(pool: PoolSpec, facts: ClusterFacts) -> list[FieldError]:
    problems = []
    for key, value in pool.node_selector.items():
        if not LABEL_KEY.match(key):
            problems.append(FieldError(f"node_selector.{key}", "is not a label key"))
        elif not LABEL_VALUE.match(value):
            problems.append(FieldError(f"node_selector.{key}", f"{value!r} is not a label value"))
    return problems


def _access(pool: PoolSpec, facts: ClusterFacts) -> list[FieldError]:
    problems = [FieldError("access_namespaces", f"{ns!r} is not a namespace name")
                for ns in pool.access_namespaces if not NAMESPACE.match(ns)]
    problems += [FieldError("access_service_accounts", f"{sa!r} is not '<namespace>:<name>' "
                            "or 'system:serviceaccount:<namespace>:<name>'")
                 for sa in pool.access_service_accounts if not SERVICE_ACCOUNT.match(sa)]
    problems += [FieldError("access_groups", "a group name may not be empty")
                 for group in pool.access_groups if not group.strip()]
    return problems


def _selector(selector: DeviceSelector, where: str) -> list[FieldError]:
    problems = []
    for name in ("inventory_ids", "products"):
        if any(not v.strip() for v in getattr(selector, name)):
            problems.append(FieldError(f"{where}.{name}", "an entry may not be empty"))
    for name in ("pci_vendors", "pci_devices"):
        bad = [v for v in getattr(selector, name) if not PCI_ID.match(v)]
        if bad:
            problems.append(FieldError(f"{where}.{name}", f"{bad[0]!r} is not a 4-digit lower-case "
                                       "hex PCI id like '10de'"))
    bad = [p for p in selector.mig_profiles if not MIG_PROFILE.match(p)]
    if bad:
        problems.append(FieldError(f"{where}.mig_profiles", f"{bad[0]!r} is not a MIG profile name "
                                   "like '1g.10gb'"))
    return problems


def _overlap(include: DeviceSelector, exclude: DeviceSelector) -> list[FieldError]:
    """A value both included and excluded selects nothing: almost surely a mistake."""
    problems = []
    for name in ("inventory_ids", "products", "pci_vendors", "pci_devices", "mig_profiles"):
        both = sorted(set(getattr(include, name)) & set(getattr(exclude, name)))
        if both:
            problems.append(FieldError(f"exclude.{name}", f"{both[0]!r} is also in include.{name}"))
    if include.mig_capable is not None and include.mig_capable == exclude.mig_capable:
        problems.append(FieldError("exclude.mig_capable", "equals include.mig_capable: the pool "
                                   "would select nothing"))
    return problems
