"""Cluster I/O with lightkube (a maintained Kubernetes client), kept thin: every decision about
what to write is made by pure reconcile functions; this module only reads, watches and writes.

None of this runs in the test suite: no Kubernetes API server can run on the machines this
project is built on, and a mock of one would test nothing. What runs here is the pure part
(reconcile tables, rendered objects validated against the Kubernetes schemas).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType, on_error_retry  # noqa: F401  (PatchType: for callers)

from schemas import kubernetes as k8s

log = logging.getLogger("gpuledger.kube")
FIELD_MANAGER = "gpuledger"

GPUPool = create_global_resource(k8s.POOL_GROUP, k8s.POOL_VERSION, k8s.POOL_KIND, k8s.POOL_PLURAL)
GpuClaim = create_namespaced_resource(k8s.CLAIM_GROUP, k8s.CLAIM_VERSION, k8s.CLAIM_KIND, k8s.CLAIM_PLURAL)


def client() -> AsyncClient:
    """In a pod: its service account; elsewhere: the current kubeconfig context."""
    return AsyncClient(field_manager=FIELD_MANAGER)


async def apply_all(api: AsyncClient, objects: Iterable[dict]) -> None:
    """Server-side apply, forcing our fields: these objects are gpuledger's to own."""
    for obj in objects:
        await api.apply(codecs.from_dict(obj), field_manager=FIELD_MANAGER, force=True)


async def watch_objects(api: AsyncClient, resource: Any) -> AsyncIterator[tuple[str, dict]]:
    """(event type, object as a dict) for every change, listed first and then watched; the
    watch restarts after errors (lightkube resumes from the last resourceVersion)."""
    async for event_type, obj in api.watch(resource, on_error=on_error_retry):
        yield event_type, _as_dict(obj)


async def patch_status(api: AsyncClient, resource: Any, name: str, status: dict,
                       namespace: str | None = None) -> None:
    """A merge patch of the status subresource (the spec is the user's)."""
    await api.patch(resource.Status, name, {"status": status}, namespace=namespace,
                    patch_type=PatchType.MERGE)


async def patch_node_conditions(api: AsyncClient, node: str, conditions: list[dict]) -> None:
    """Node conditions (seed 004's InfraDegraded / HasFaulted) on the Node's status; a strategic
    merge patch keys conditions by type, so kubelet's own conditions stay as they are."""
    await api.patch(Node.Status, node, {"status": {"conditions": conditions}},
                    patch_type=PatchType.STRATEGIC)


def _as_dict(obj: Any) -> dict:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
