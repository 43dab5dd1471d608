"""The claim service's controller mode on a cluster (GPULEDGER_KUBE_CONTROLLER=true): watch
GpuClaim objects (seed 001), submit or release their claims as gpuclaims.py decides, keep the
release finalizer, and write each object's status as its claim changes. Thin I/O.

Not run in this project's tests: no Kubernetes API server runs here (docs/kubernetes.md).
"""

from __future__ import annotations

import asyncio
import logging

from schemas.commands import ReleaseClaim, SubmitClaim
from schemas.kubernetes import claim_id_for
from services.claim.gpuclaims import GpuClaimInvalid, claim_commands, claim_status, finalizers_after
from shared import kube
from shared.commands import DomainError

log = logging.getLogger("gpuledger.claim.kube")
STATUS_EVERY_S = 5.0


async def run(service) -> None:
    api = kube.client()
    objects: dict[tuple[str, str], dict] = {}
    await asyncio.gather(_watch(api, service, objects), _refresh(api, service, objects))


async def _watch(api, service, objects) -> None:
    async for event_type, obj in kube.watch_objects(api, kube.GpuClaim):
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        objects.pop(key, None) if event_type == "DELETED" else objects.__setitem__(key, obj)
        if event_type != "DELETED":
            await _reconcile(api, service, obj)


async def _reconcile(api, service, obj: dict) -> None:
    meta = obj["metadata"]
    try:
        for command in claim_commands(obj, service.state):
            if isinstance(command, SubmitClaim):
                await service.submit(command.claim, internal=True)  # it writes the gpuclaim.* labels
            elif isinstance(command, ReleaseClaim):
                await service.release(command.claim_id, command.reason)
    except (GpuClaimInvalid, DomainError) as err:
        await kube.patch_status(api, kube.GpuClaim, meta["name"], {"phase": "Rejected", "reasons": [str(err)]},
                                namespace=meta["namespace"])
        return
    finalizers = finalizers_after(obj, service.state)
    if finalizers is not None:
        await api.patch(kube.GpuClaim, meta["name"], {"metadata": {"finalizers": finalizers}},
                        namespace=meta["namespace"], patch_type=kube.PatchType.MERGE)


async def _refresh(api, service, objects) -> None:
    written: dict[tuple[str, str], dict] = {}
    while True:
        await asyncio.sleep(STATUS_EVERY_S)
        for key, obj in list(objects.items()):
            meta = obj["metadata"]
            claim = service.state.claims.get(claim_id_for(meta.get("uid", "")))
            status = claim_status(claim, service.state, meta.get("generation", 0))
            if written.get(key) == status:
                continue
            try:
                await kube.patch_status(api, kube.GpuClaim, meta["name"], status, namespace=meta["namespace"])
                written[key] = status
            except Exception:  # the object may be gone, or the API server busy: next round
                log.exception("status of GpuClaim %s/%s", *key)
