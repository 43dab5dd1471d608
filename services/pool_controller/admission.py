"""Pod admission for GPU pools (seed 004), pure: AdmissionReview v1 in, AdmissionReview out.

How a pod asks for a pool:
- device-plugin backend: an extended resource `<prefix>/<pool>` (or the pool's own `resource`)
  in any container's requests or limits;
- dra backend: the annotation `<prefix>/pool: <pool>` (or a `resourceClaims` entry naming the
  pool's ResourceClaimTemplate `gpu-pool-<pool>`); the pod itself names no GPU resource.

Common checks: the pool exists, the pod may use it (namespace, service account, the requester's
groups), and it has at least one usable node (not lost, not InfraDegraded/HasFaulted, with a
device that is neither Faulted nor Ignored). The mutation pins the pod to those nodes (nodeAffinity
on the hostname, plus the pool's node selector), tolerates the pool taint, labels the pod with its
pool, adds a topology spread constraint for Spread pools and, for dra, the pool's resource claim.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass

from schemas.kubernetes import SEED_POOL_PREFIX
from schemas.types import PoolSpec
from services.pool_controller.claim_pods import ClaimRefused, FindClaim, claim_name, claim_patch
from services.pool_controller.podpatch import HOSTNAME, add as _add, containers as _containers, require_hosts
from services.pool_controller.projection import NodeFacts

API_VERSION = "admission.k8s.io/v1"


@dataclass(frozen=True)
class PoolPlacement:
    """A pool and the nodes that hold its devices."""

    spec: PoolSpec
    nodes: Mapping[str, NodeFacts]

    @property
    def usable_nodes(self) -> list[str]:
        return sorted(n for n, facts in self.nodes.items() if facts.usable)


@dataclass(frozen=True)
class AdmissionConfig:
    resource_prefix: str = "gpu.gpuledger.io"
    # Other prefixes a pod may ask with (seed 004's `gpu.deckhouse.io/<pool>`): the mutation
    # renames them to the pool's own resource, the one its device plugin advertises.
    aliases: tuple[str, ...] = (SEED_POOL_PREFIX,)
    # schedulers a seed 001 pod may name that gpuledger replaces (it decided the node already)
    replaced_schedulers: tuple[str, ...] = ("gpu-scheduler",)

    @property
    def pool_key(self) -> str:
        """The annotation, label and taint key that name a pool on pods and nodes."""
        return f"{self.resource_prefix}/pool"

    @property
    def prefixes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.resource_prefix, *self.aliases)))

    def resource_of(self, pool: PoolSpec) -> str:
        return pool.resource or f"{self.resource_prefix}/{pool.name}"

    def pool_named_by(self, resource: str, pools: Mapping[str, "PoolPlacement"]) -> str | None:
        """The pool a resource name asks for: a pool's own resource, or `<any prefix>/<pool>`."""
        for name, placement in pools.items():
            if self.resource_of(placement.spec) == resource:
                return name
        prefix, _, name = resource.partition("/")
        return name if prefix in self.prefixes and name else None


class Denied(Exception):
    """The pod may not be admitted; the message tells its author why."""


def claim_template(pool: str) -> str:
    """The pool's one ResourceClaimTemplate (and the claim name inside the pod)."""
    return f"gpu-pool-{pool}"


def _no_claims(namespace: str, name: str) -> None:
    return None


def review(admission_review: dict, pools: Mapping[str, PoolPlacement], config: AdmissionConfig,
           mutate: bool = True, find_claim: FindClaim = _no_claims) -> dict:
    """Answer one AdmissionReview: allowed (with a JSONPatch when `mutate`) or denied."""
    request = admission_review.get("request") if isinstance(admission_review, dict) else None
    if not isinstance(request, dict):
        return _response("", False, "AdmissionReview has no request", code=400)
    uid = str(request.get("uid", ""))
    if _kind(request) != "Pod" or request.get("operation", "CREATE") != "CREATE":
        return _response(uid, True)
    try:
        patch = admit_pod(request, pools, config, find_claim)
    except (Denied, ClaimRefused) as err:
        return _response(uid, False, str(err))
    except (AttributeError, TypeError, KeyError) as err:  # a pod not shaped like a pod
        return _response(uid, False, f"malformed pod: {type(err).__name__}: {err}", code=400)
    return _response(uid, True, patch=patch if mutate else [])


def admit_pod(request: dict, pools: Mapping[str, PoolPlacement], config: AdmissionConfig,
              find_claim: FindClaim = _no_claims) -> list:
    """The JSONPatch for an admissible pod; raises `Denied` with the reason otherwise."""
    pod = request.get("object") or {}
    namespace = request.get("namespace") or pod.get("metadata", {}).get("namespace", "default")
    by_resource, by_claim = requested_pools(pod, pools, config)
    wanted = sorted(set(by_resource) | set(by_claim))
    if claim_name(pod):
        if wanted:
            raise Denied(f"the pod names a GpuClaim and asks for GPU pool {wanted[0]}; use one of them")
        return claim_patch(pod, namespace, find_claim, config.replaced_schedulers)
    if not wanted:
        return []
    placement = _one_pool(wanted, by_resource, by_claim, pools, config)
    _check_access(placement.spec, namespace, pod, request.get("userInfo") or {})
    nodes = placement.usable_nodes
    if not nodes:
        raise Denied(_no_usable_node(placement))
    return _patch(pod, placement, nodes, config)


def requested_pools(pod: dict, pools: Mapping[str, PoolPlacement],
                    config: AdmissionConfig) -> tuple[list[str], list[str]]:
    """Pools the pod names by extended resource, and pools it names by DRA claim/annotation."""
    by_resource = []
    for key in _resource_names(pod):
        name = config.pool_named_by(key, pools)
        if name is not None:  # a pool that does not exist is denied below
            by_resource.append(name)
    annotation = (pod.get("metadata", {}).get("annotations") or {}).get(config.pool_key, "")
    by_claim = [name.strip() for name in annotation.split(",") if name.strip()]
    templates = {claim_template(name): name for name in pools}
    for claim in pod.get("spec", {}).get("resourceClaims") or []:
        template = claim.get("resourceClaimTemplateName", "")
        if template in templates:
            by_claim.append(templates[template])
    return sorted(set(by_resource)), sorted(set(by_claim))


def _resource_names(pod: dict) -> set[str]:
    names = set()
    for _, container in _containers(pod.get("spec", {})):
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            names |= set(resources.get(part) or {})
    return names



def _one_pool(wanted, by_resource, by_claim, pools, config) -> PoolPlacement:
    missing = [name for name in wanted if name not in pools]
    if missing:
        raise Denied(f"GPU pool {missing[0]} does not exist")
    if len(wanted) > 1:
        raise Denied(f"a pod may use one GPU pool; this one asks for {', '.join(wanted)}")
    name = wanted[0]
    placement = pools[name]
    if name in by_resource and name in by_claim:
        raise Denied(f"the pod uses pool {name} both as resource {config.resource_of(placement.spec)} "
                     "and as a DRA claim; use one of them")
    if placement.spec.backend == "dra" and name in by_resource:
        raise Denied(f"pool {name} uses the dra backend: ask for it with the annotation "
                     f"{config.pool_key}: {name}, not with resource {config.resource_of(placement.spec)}")
    if placement.spec.backend != "dra" and name in by_claim:
        raise Denied(f"pool {name} uses the device-plugin backend: request resource "
                     f"{config.resource_of(placement.spec)} in the container's limits instead")
    return placement


def _check_access(pool: PoolSpec, namespace: str, pod: dict, user: dict) -> None:
    """Same rule as the allocator's `has_access`, plus the requester's groups."""
    if pool.access_namespaces and namespace not in pool.access_namespaces:
        raise Denied(f"namespace {namespace} has no access to GPU pool {pool.name}")
    account = pod.get("spec", {}).get("serviceAccountName") or "default"
    allowed = {f"{namespace}:{account}", f"system:serviceaccount:{namespace}:{account}"}
    if pool.access_service_accounts and not allowed & set(pool.access_service_accounts):
        raise Denied(f"service account {namespace}:{account} has no access to GPU pool {pool.name}")
    groups = set(user.get("groups") or [])
    if pool.access_groups and not groups & set(pool.access_groups):
        raise Denied(f"user {user.get('username', '?')} is in none of the groups allowed to use "
                     f"GPU pool {pool.name} ({', '.join(pool.access_groups)})")


def _no_usable_node(placement: PoolPlacement) -> str:
    name = placement.spec.name
    if not placement.nodes:
        return f"GPU pool {name} selects no device yet"
    why = [f"{n}: {_unusable_reason(f)}" for n, f in sorted(placement.nodes.items())]
    return f"GPU pool {name} has no usable node ({'; '.join(why)})"


def _unusable_reason(facts: NodeFacts) -> str:
    if facts.lost:
        return "lost"
    if facts.condition != "Ready":
        return facts.condition
    return f"all {facts.unhealthy_units} pool devices Faulted or Ignored"


# --- the mutation ---------------------------------------------------------------------------


def _patch(pod: dict, placement: PoolPlacement, nodes: list[str], config: AdmissionConfig) -> list:
    pool = placement.spec
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    ops = [_add("/metadata/labels", {**(metadata.get("labels") or {}), config.pool_key: pool.name})]
    if pool.node_selector:
        ops.append(_add("/spec/nodeSelector", _node_selector(spec, pool)))
    ops.append(_add("/spec/affinity", require_hosts(spec, nodes)))
    ops.append(_add("/spec/tolerations", _tolerations(spec, pool, config)))
    if pool.strategy == "Spread":
        ops.append(_add("/spec/topologySpreadConstraints", _spread(spec, pool, config)))
    if pool.backend == "dra":
        ops += _dra_claim(spec, pool)
    else:
        ops += _canonical_resources(spec, pool, config)
    return ops


def _canonical_resources(spec: dict, pool: PoolSpec, config: AdmissionConfig) -> list:
    """Rename `<alias prefix>/<pool>` to the pool's resource: the kubelet only knows the name the
    pool's device plugin advertises, so an alias left as written would keep the pod Pending."""
    canonical, ops = config.resource_of(pool), []
    aliases = {f"{prefix}/{pool.name}" for prefix in config.prefixes} - {canonical}
    for path, container in _containers(spec):
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            amounts = resources.get(part) or {}
            if aliases & set(amounts):
                renamed = {(canonical if k in aliases else k): v for k, v in amounts.items()}
                ops.append(_add(f"{path}/resources/{part}", renamed))
    return ops


def _node_selector(spec: dict, pool: PoolSpec) -> dict:
    current = dict(spec.get("nodeSelector") or {})
    for key, value in pool.node_selector.items():
        if current.get(key, value) != value:
            raise Denied(f"the pod's nodeSelector {key}={current[key]} conflicts with GPU pool "
                         f"{pool.name}'s {key}={value}")
        current[key] = value
    return current


def _tolerations(spec: dict, pool: PoolSpec, config: AdmissionConfig) -> list:
    tolerations = list(spec.get("tolerations") or [])
    wanted = {"key": config.pool_key, "operator": "Equal", "value": pool.name, "effect": "NoSchedule"}
    if wanted not in tolerations:
        tolerations.append(wanted)
    return tolerations


def _spread(spec: dict, pool: PoolSpec, config: AdmissionConfig) -> list:
    # ScheduleAnyway: Spread is the pool's preference, it must not leave pods pending.
    constraints = list(spec.get("topologySpreadConstraints") or [])
    constraints.append({"maxSkew": 1, "topologyKey": pool.topology_key or HOSTNAME,
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": {"matchLabels": {config.pool_key: pool.name}}})
    return constraints


def _dra_claim(spec: dict, pool: PoolSpec) -> list:
    name = claim_template(pool.name)
    ops = []
    claims = list(spec.get("resourceClaims") or [])
    if not any(c.get("name") == name for c in claims):
        claims.append({"name": name, "resourceClaimTemplateName": name})
        ops.append(_add("/spec/resourceClaims", claims))
    for i, container in enumerate(spec.get("containers") or []):
        resources = dict(container.get("resources") or {})
        refs = list(resources.get("claims") or [])
        if not any(r.get("name") == name for r in refs):
            resources["claims"] = refs + [{"name": name}]
            ops.append(_add(f"/spec/containers/{i}/resources", resources))
    return ops


# --- the AdmissionReview envelope --------------------------------------------------------------


def _kind(request: dict) -> str:
    kind = request.get("kind")
    return kind.get("kind", "") if isinstance(kind, dict) else str(kind or "")


def _response(uid: str, allowed: bool, message: str = "", code: int = 403,
              patch: list | None = None) -> dict:
    response: dict = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": code, "reason": "Forbidden" if code == 403 else "BadRequest",
                              "message": message}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
