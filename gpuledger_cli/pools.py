"""`gpuledger pool create|get|list|update|delete`: GPU pools through the pool controller."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gpuledger_cli.command_client import command_group, json_option, nats_url_option, read_document, send, show
from schemas import subjects
from schemas.commands import (
    CreatePool, DeletePool, GetPool, IgnoreDevice, ListPools, Query, RenderPool, SetFleetDefaults, UpdatePool)
from services.pool_controller.manifest import ManifestError, pool_from_document

SERVICE = "pool-controller"
pool_app, register = command_group("pool", "GPU pools (Deckhouse-style): validated, immutable but for access and scheduling.")

FILE = typer.Option(..., "-f", "--file", help="Pool as YAML or JSON: a GPUPool manifest (seed "
                    "004's, as written) or a flat PoolSpec; '-' reads stdin.")
JSON = json_option()


def _load(path: Path):
    try:
        return pool_from_document(read_document(path))
    except ManifestError as err:
        typer.echo(f"error: {path}: {err}", err=True)
        raise typer.Exit(1)


@pool_app.command("create")
def create(file: Path = FILE, as_json: bool = JSON, nats_url: str = nats_url_option()) -> None:
    """Create a pool (re-creating an identical one is a no-op)."""
    data = send(nats_url, subjects.command("pool.create"), CreatePool(pool=_load(file)), SERVICE)
    show(data, as_json, lambda d: f"pool {d['pool']} {'created' if d['created'] else 'exists, unchanged'}")
    _say_if_empty(nats_url, data["pool"])


def _say_if_empty(nats_url: str | None, name: str) -> None:
    """A pool whose selectors match no device of the fleet is taken without a word by the
    controller (nodes may join later); say so, naming what the selectors are matched against: a
    `nodeSelector` written for Kubernetes (`kubernetes.io/hostname`) matches only the labels the node
    agents register (session 35, docs/outsider.md 4.17)."""
    got = send(nats_url, subjects.query("pool.get"), GetPool(name=name), SERVICE)
    if got.get("devices"):
        return
    typer.echo(f"note: pool {name} holds no device of the fleet as it is now: its device selectors and "
               "node_selector match none, or every device they match is in a pool created before it "
               "(node_selector is matched against the labels node agents register: "
               "GPULEDGER_NODE_LABELS, gpu-model, gpu-count, mig; not the Kubernetes Node's labels)", err=True)


@pool_app.command("apply")
def apply(file: Path = FILE, as_json: bool = JSON, nats_url: str = nats_url_option()) -> None:
    """Create the pool, or bring an existing one's access and scheduling in line (kubectl-apply
    style); a change to any immutable field is refused naming it."""
    pool = _load(file)
    existing = send(nats_url, subjects.query("pool.list"), ListPools(), SERVICE)
    if any(p["name"] == pool.name for p in existing):
        data = send(nats_url, subjects.command("pool.update"), UpdatePool(pool=pool), SERVICE)
        show(data, as_json, lambda d: f"pool {d['pool']} {'configured' if d['changed'] else 'unchanged'}")
        return
    data = send(nats_url, subjects.command("pool.create"), CreatePool(pool=pool), SERVICE)
    show(data, as_json, lambda d: f"pool {d['pool']} {'created' if d['created'] else 'unchanged'}")
    _say_if_empty(nats_url, data["pool"])


@pool_app.command("render")
def render(name: str = typer.Argument(..., help="the pool's name"),
           namespace: str = typer.Option("gpuledger", "--namespace", "-n", help="Namespace of the "
                                         "device-plugin and MIG manager ConfigMaps."),
           claim_namespace: list[str] = typer.Option([], "--claim-namespace", help="dra pools: "
                                                     "render a ResourceClaimTemplate here (repeat; "
                                                     "default: the pool's access namespaces)."),
           k8s_version: str = typer.Option("", "--k8s-version", help="Cluster version the DRA "
                                           "objects are for (default: the controller's)."),
           nats_url: str = nats_url_option()) -> None:
    """Print the cluster objects the pool needs as YAML (pipe into kubectl apply -f -)."""
    import yaml

    data = send(nats_url, subjects.query("pool.render"), RenderPool(
        name=name, namespace=namespace, claim_namespaces=claim_namespace, k8s_version=k8s_version), SERVICE)
    notes = "".join(f"# note: {n}\n" for n in data["notes"])
    typer.echo(notes + yaml.safe_dump_all(data["objects"], sort_keys=False), nl=False)


@pool_app.command("ignore")
def ignore(node: str = typer.Argument(..., help="the node the device is on"), device: str = typer.Argument(..., help="UUID, <index> or <index>:<mig index>."),
           reason: str = typer.Option("", "--reason", help="Why (shown with the device)."),
           undo: bool = typer.Option(False, "--undo", help="Give the device back instead."),
           as_json: bool = JSON, nats_url: str = nats_url_option()) -> None:
    """Mark a device Ignored (seed 004: out of service; running work is not evicted)."""
    data = send(nats_url, subjects.command("device.ignore"),
                IgnoreDevice(node=node, device=device, ignored=not undo, reason=reason), SERVICE)
    state = "ignored" if data["ignored"] else "in service"
    show(data, as_json, lambda d: f"{node} {d['uuid']} {state}{'' if d['changed'] else ' (unchanged)'}")


@pool_app.command("defaults")
def defaults(max_claims_per_node: Optional[int] = typer.Option(
                 None, "--max-claims-per-node", min=0, max=1000,
                 help="The cap of live claims (and device grants) of every node that neither its label "
                      "gpuledger.io/max-claims nor a pool's max_claims_per_node sets; 0 = the built-in "
                      "110 + 10 per device. A lower cap evicts nothing. Without it: show the defaults."),
             as_json: bool = JSON, nats_url: str = nats_url_option()) -> None:
    """Show, or set, the fleet's defaults (a node's cap of live claims)."""
    if max_claims_per_node is None:
        data = send(nats_url, subjects.query("pool.defaults.get"), Query(), SERVICE)
    else:
        data = send(nats_url, subjects.command("pool.defaults.set"),
                    SetFleetDefaults(max_claims_per_node=max_claims_per_node), SERVICE)
    show(data, as_json, _render_defaults)


def _render_defaults(data: dict) -> str:
    cap = data["max_claims_per_node"]
    line = (f"max claims per node: {cap}" if cap else
            "max claims per node: not set (110 + 10 per device, at most 1000)")
    return line + (" (unchanged)" if data.get("changed") is False else "")


@pool_app.command("update")
def update(file: Path = FILE, as_json: bool = JSON, nats_url: str = nats_url_option()) -> None:
    """Change a pool's access or scheduling (strategy, topology key); any other changed field is refused (immutable)."""
    data = send(nats_url, subjects.command("pool.update"), UpdatePool(pool=_load(file)), SERVICE)
    show(data, as_json, lambda d: f"pool {d['pool']} {'updated' if d['changed'] else 'unchanged'}")


@pool_app.command("delete")
def delete(name: str = typer.Argument(..., help="the pool's name"), as_json: bool = JSON, nats_url: str = nats_url_option()) -> None:
    """Delete a pool; refused while any of its devices is allocated."""
    data = send(nats_url, subjects.command("pool.delete"), DeletePool(name=name), SERVICE)
    show(data, as_json, lambda d: f"pool {d['pool']} deleted")


@pool_app.command("get")
def get(name: str = typer.Argument(..., help="the pool's name"), as_json: bool = JSON, nats_url: str = nats_url_option()) -> None:
    """A pool's spec, the devices it selects and its allocations."""
    show(send(nats_url, subjects.query("pool.get"), GetPool(name=name), SERVICE), as_json, _render_pool)


@pool_app.command("list")
def list_pools(as_json: bool = JSON, nats_url: str = nats_url_option()) -> None:
    """Every pool with its device and node counts."""
    show(send(nats_url, subjects.query("pool.list"), ListPools(), SERVICE), as_json, _render_list)


def _render_list(pools: list[dict]) -> str:
    if not pools:
        return "no pools"
    rows = [("NAME", "BACKEND", "UNIT", "SLICES", "STRATEGY", "DEVICES", "NODES", "ALLOCATED",
             "MAX CLAIMS/NODE")]
    rows += [(p["name"], p["backend"], p["unit"], str(p["slices_per_unit"]), p["strategy"],
              str(p["devices"]), str(p["nodes"]), str(p["allocated_devices"]),
              str(p.get("max_claims_per_node") or "-")) for p in pools]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _render_pool(status: dict) -> str:
    spec = status["spec"]
    lines = [f"pool {spec['name']}: backend {spec.get('backend', 'device-plugin')}, unit "
             f"{spec.get('unit', 'Card')}{' ' + spec['mig_profile'] if spec.get('mig_profile') else ''}, "
             f"{spec.get('slices_per_unit', 1)} slice(s) per unit, {spec.get('strategy', 'BinPack')}"
             + (f", at most {spec['max_claims_per_node']} live claims per node" if spec.get('max_claims_per_node') else "")]
    access = [f"{k.removeprefix('access_')}={','.join(spec[k])}" for k in
              ("access_namespaces", "access_service_accounts", "access_groups") if spec.get(k)]
    lines.append(f"access: {'; '.join(access) or 'everyone'}")
    lines.append(f"devices: {len(status['devices'])} on {len(status['nodes'])} node(s), "
                 f"{status['capacity_slots']} healthy slot(s)")
    for d in status["devices"]:
        extra = " ".join(x for x in (d.get("mig_profile", ""), d["health"] if d["health"] != "Healthy"
                                     else "", d.get("node_condition", "")) if x)
        holders = f" held by {', '.join(d['holders'])}" if d["holders"] else ""
        lines.append(f"  {d['node']}/{d['index']} {d['model']} {d['uuid']} {extra}".rstrip() + holders)
    lines.append(f"allocations: {', '.join(status['allocations']) or 'none'}")
    return "\n".join(lines)
