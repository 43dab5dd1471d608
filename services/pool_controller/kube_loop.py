"""The pool controller's controller mode on a cluster (GPULEDGER_KUBE_CONTROLLER=true): watch
GPUPool objects, send the commands kube_reconcile decides, write their status, apply the objects
`pool render` prints, and write seed 004's node conditions. Thin I/O around pure functions.

Not run in this project's tests: no Kubernetes API server runs here (docs/kubernetes.md).
"""

from __future__ import annotations

import asyncio
import datetime
import logging

from schemas.commands import CreatePool, DeletePool, UpdatePool
from services.pool_controller.kube_reconcile import node_conditions, pool_commands, pool_status
from services.pool_controller.manifest import ManifestError
from services.pool_controller.rendering import RenderRequest, render_pool
from shared import kube

log = logging.getLogger("gpuledger.pool_controller.kube")
STATUS_EVERY_S = 10.0


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


async def run(controller, namespace: str) -> None:
    api = kube.client()
    objects: dict[str, dict] = {}
    await asyncio.gather(_watch_pools(api, controller, objects, namespace),
                         _refresh(api, controller, objects, namespace))


async def _watch_pools(api, controller, objects: dict[str, dict], namespace: str) -> None:
    async for event_type, obj in kube.watch_objects(api, kube.GPUPool):
        name = obj["metadata"]["name"]
        deleted = event_type == "DELETED"
        objects.pop(name, None) if deleted else objects.__setitem__(name, obj)
        await _reconcile(api, controller, obj, deleted, namespace)


async def _reconcile(api, controller, obj: dict, deleted: bool, namespace: str) -> None:
    name, generation = obj["metadata"]["name"], obj["metadata"].get("generation", 0)
    await controller.catch_up()
    try:
        commands = pool_commands(obj, controller.state, deleted)
    except ManifestError as err:
        await kube.patch_status(api, kube.GPUPool, name, pool_status(controller.state, name, generation, str(err), _now()))
        return
    error = ""
    for command in commands:
        handler = {CreatePool: controller.create, UpdatePool: controller.update, DeletePool: controller.delete}[type(command)]
        reply = await handler(command)
        if not reply.ok:
            error = f"{reply.error.field}: {reply.error.message}"
    if not deleted:
        await kube.patch_status(api, kube.GPUPool, name, pool_status(controller.state, name, generation, error, _now()))


async def _refresh(api, controller, objects: dict[str, dict], namespace: str) -> None:
    """Status, rendered objects and node conditions follow the ledger, checked every few seconds
    and written only when they changed."""
    written: dict[str, object] = {}
    while True:
        await asyncio.sleep(STATUS_EVERY_S)
        state = controller.state
        try:
            for name, obj in list(objects.items()):
                if name not in state.pools:
                    continue
                await _write_if_changed(written, f"status/{name}", pool_status(state, name, obj["metadata"].get("generation", 0)),
                                        lambda s: kube.patch_status(api, kube.GPUPool, name, s))
                rendered = render_pool(state, name, controller.admission.resource_of(state.pools[name]),
                                       RenderRequest(namespace, (), controller.facts.k8s_version))
                await _write_if_changed(written, f"render/{name}", rendered.objects,
                                        lambda objs: kube.apply_all(api, objs))
            for node in list(state.nodes):
                conditions = node_conditions(state, node, "")
                await _write_if_changed(written, f"node/{node}", conditions, lambda c: kube.patch_node_conditions(
                    api, node, [dict(x, lastTransitionTime=_now()) for x in c]))
        except Exception:  # a cluster hiccup: log, keep the loop, try again next round
            log.exception("refreshing cluster objects failed")


async def _write_if_changed(written: dict, key: str, value, write) -> None:
    if written.get(key) != value:
        await write(value)
        written[key] = value
