"""JSONPatch pieces both admission paths (pools, seed 001's claims) build pods with, pure."""

from __future__ import annotations

import copy

HOSTNAME = "kubernetes.io/hostname"


def add(path: str, value) -> dict:
    # `add` on an existing object member replaces it (RFC 6902), so one op covers both cases.
    return {"op": "add", "path": path, "value": value}


def containers(spec: dict):
    """(JSON pointer, container) of every container and init container."""
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(kind) or []):
            yield f"/spec/{kind}/{i}", container


def require_hosts(spec: dict, nodes: list[str]) -> dict:
    """The pod's affinity with 'hostname in `nodes`' added to every required term: terms are
    ORed, so adding it to only one would let the others place the pod anywhere."""
    affinity = copy.deepcopy(spec.get("affinity") or {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    expression = {"key": HOSTNAME, "operator": "In", "values": list(nodes)}
    for term in terms:
        term["matchExpressions"] = list(term.get("matchExpressions") or []) + [expression]
    required["nodeSelectorTerms"] = terms
    return affinity
