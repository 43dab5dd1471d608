"""Every object a pool needs on the cluster, by backend and unit (see render.py, render_dra.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ledger.state import State
from services.pool_controller.projection import pool_units
from services.pool_controller.render import device_plugin_config, mig_manager_config
from services.pool_controller.render_dra import claim_template, device_class, dra_api_version


@dataclass(frozen=True)
class RenderRequest:
    namespace: str = "gpuledger"
    claim_namespaces: tuple[str, ...] = ()
    k8s_version: str = ""


@dataclass
class Rendered:
    objects: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def render_pool(state: State, name: str, resource: str, request: RenderRequest) -> Rendered:
    """The pool's objects from the fold: which devices it holds, where, and in what health."""
    pool, units = state.pools[name], pool_units(state, name)
    out = Rendered()
    if not units:
        out.notes.append(f"pool {name} selects no device yet: the objects name none")
    if pool.backend == "dra":
        api = dra_api_version(request.k8s_version)
        out.objects.append(device_class(pool, units, api))
        namespaces = request.claim_namespaces or tuple(pool.access_namespaces)
        if not namespaces:
            namespaces = ("default",)
            out.notes.append(f"pool {name} is open to every namespace: a ResourceClaimTemplate is "
                             "rendered for 'default' only; pass --claim-namespace for others")
        out.objects += [claim_template(pool, ns, api) for ns in namespaces]
        return out
    out.objects.append(device_plugin_config(pool, resource, units, request.namespace))
    if pool.unit == "MIG":
        cards = [u for node in {u.node for u in units} for u in state.nodes[node].units]
        out.objects.append(mig_manager_config(pool, units, cards, request.namespace))
    return out
