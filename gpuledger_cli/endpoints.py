"""`gpuledger endpoint create|get|list|delete|load`: serverless endpoints (claim service)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gpuledger_cli.command_client import (command_group, convert, json_option, nats_url_option, read_document,
                                          send, show)
from schemas import subjects
from schemas.commands import (CreateEndpoint, DeleteEndpoint, GetEndpoint, ListEndpoints, ReportEndpointLoad,
                              UpdateEndpoint)
from schemas.seed import is_seed_endpoint
from schemas.types import MAX_PRIORITY, EndpointSpec

SERVICE = "claim"
endpoint_app, register = command_group("endpoint", "Serverless endpoints: workers are claims the "
                                        "autoscaler adds and releases.")
JSON = json_option()


@endpoint_app.command("create")
def create(
    name: Optional[str] = typer.Argument(None, help="Endpoint name (or give -f)."),
    file: Optional[Path] = typer.Option(None, "-f", "--file", help="EndpointSpec as JSON or YAML ('-': stdin), "
                                        "in our spelling or the serverless seed's (gpus, gpuIds, workersMax, ...)."),
    namespace: str = typer.Option("default", "--namespace", "-n", help="namespace its workers are charged to"),
    gpus: str = typer.Option("any", "--gpus", help="GPU groups in priority order, e.g. "
                             "HOPPER_141,ADA_80_PRO; 'any' for every group."),
    cuda: str = typer.Option("", "--cuda", help="Allowed CUDA versions, e.g. 12.4,12.8."),
    gpus_per_worker: int = typer.Option(1, "--gpus-per-worker", min=1, help="GPUs each worker claims"),
    workers_min: int = typer.Option(0, "--workers-min", min=0, help="workers kept even when idle"),
    workers_max: int = typer.Option(3, "--workers-max", min=0, help="most workers the autoscaler adds"),
    scaler: str = typer.Option("QUEUE_DELAY", "--scaler", help="QUEUE_DELAY or REQUEST_COUNT."),
    scaler_value: int = typer.Option(4, "--scaler-value", min=0, help="Seconds of queue delay, or requests "
                                     "per minute per worker."),
    idle_timeout: float = typer.Option(5.0, "--idle-timeout", min=0, help="Seconds a worker may idle."),
    priority: int = typer.Option(0, "--priority", min=-MAX_PRIORITY, max=MAX_PRIORITY, help="priority of its worker claims"),
    image: str = typer.Option("", "--image", help="Container image the workers run (imageName)."),
    live: bool = typer.Option(False, "--live", help="A live endpoint: its workers run the operator's "
                              "locked image (GPULEDGER_LIVE_IMAGE), which no create or update can change."),
    as_json: bool = JSON,
    nats_url: str = nats_url_option(),
) -> None:
    """Create an endpoint from flags or a JSON file."""
    if file is not None:
        document = read_document(file)
        if is_seed_endpoint(document):  # the seed's spelling: sent as written, answered in it
            data = send(nats_url, subjects.command("endpoint.create"), {"endpoint": document}, SERVICE)
            show(data, as_json, _created)
            return
        spec = convert(document, EndpointSpec, "endpoint file")
    elif name:
        spec = convert({"name": name, "namespace": namespace, "gpu_groups": _split(gpus),
                        "cuda_versions": _split(cuda), "gpus_per_worker": gpus_per_worker,
                        "workers_min": workers_min, "workers_max": workers_max, "scaler_type": scaler,
                        "scaler_value": scaler_value, "idle_timeout_s": idle_timeout,
                        "priority": priority, "image": image, "live": live}, EndpointSpec, "endpoint")
    else:
        typer.echo("error: give an endpoint NAME or -f FILE", err=True)
        raise typer.Exit(1)
    data = send(nats_url, subjects.command("endpoint.create"), CreateEndpoint(endpoint=spec), SERVICE)
    show(data, as_json, _created)


def _created(d: dict) -> str:
    return f"endpoint {d['endpoint']} {'created' if d['created'] else 'exists, unchanged'}"


@endpoint_app.command("update")
def update(
    name: Optional[str] = typer.Argument(None, help="Endpoint name (or give -f with the whole spec)."),
    file: Optional[Path] = typer.Option(None, "-f", "--file", help="The endpoint's new spec as JSON or YAML "
                                        "('-': stdin), in either spelling."),
    image: Optional[str] = typer.Option(None, "--image", help="New image (refused for a live endpoint)."),
    workers_min: Optional[int] = typer.Option(None, "--workers-min", min=0, help="New workers_min."),
    workers_max: Optional[int] = typer.Option(None, "--workers-max", min=0, help="New workers_max."),
    scaler: Optional[str] = typer.Option(None, "--scaler", help="New scaler: QUEUE_DELAY or REQUEST_COUNT."),
    scaler_value: Optional[int] = typer.Option(None, "--scaler-value", min=0, help="New scaler value."),
    idle_timeout: Optional[float] = typer.Option(None, "--idle-timeout", min=0, help="New idle timeout (s)."),
    as_json: bool = JSON,
    nats_url: str = nats_url_option(),
) -> None:
    """Change an endpoint: the flags given over its current spec, or a whole spec with -f.

    Workers added from then on use the new spec; a live endpoint's image stays locked."""
    if file is not None:
        document = read_document(file)
        payload = {"endpoint": document} if is_seed_endpoint(document) else UpdateEndpoint(
            endpoint=convert(document, EndpointSpec, "endpoint file"))
    elif name:
        current = send(nats_url, subjects.query("endpoint.get"), GetEndpoint(name=name), SERVICE)["spec"]
        changes = {"image": image, "workers_min": workers_min, "workers_max": workers_max,
                   "scaler_type": scaler, "scaler_value": scaler_value, "idle_timeout_s": idle_timeout}
        spec = current | {k: v for k, v in changes.items() if v is not None}
        payload = UpdateEndpoint(endpoint=convert(spec, EndpointSpec, "endpoint"))
    else:
        typer.echo("error: give an endpoint NAME (with the flags to change) or -f FILE", err=True)
        raise typer.Exit(1)
    data = send(nats_url, subjects.command("endpoint.update"), payload, SERVICE)
    show(data, as_json, lambda d: f"endpoint {d['endpoint']} {'updated' if d['updated'] else 'unchanged'}")


@endpoint_app.command("delete")
def delete(name: str = typer.Argument(..., help="the endpoint's name"), as_json: bool = JSON, nats_url: str = nats_url_option()) -> None:
    """Delete an endpoint and release its workers."""
    data = send(nats_url, subjects.command("endpoint.delete"), DeleteEndpoint(name=name), SERVICE)
    show(data, as_json, lambda d: f"endpoint {d['endpoint']} deleted, released {len(d['released'])} worker(s)")


@endpoint_app.command("load")
def load(name: str = typer.Argument(..., help="the endpoint's name"),
         queued: int = typer.Option(..., "--queued", min=0, help="requests waiting now"),
         oldest_wait: float = typer.Option(0.0, "--oldest-wait", min=0, help="Seconds the oldest request waited."),
         rpm: float = typer.Option(0.0, "--rpm", min=0, help="Requests per minute."),
         as_json: bool = JSON, nats_url: str = nats_url_option()) -> None:
    """Report the endpoint's queue (what the front end does); the autoscaler acts on it."""
    command = ReportEndpointLoad(name=name, queued=queued, oldest_wait_s=oldest_wait, requests_per_min=rpm)
    data = send(nats_url, subjects.command("endpoint.load"), command, SERVICE)
    show(data, as_json, lambda d: f"load of {d['endpoint']} recorded")


@endpoint_app.command("get")
def get(name: str = typer.Argument(..., help="the endpoint's name"), as_json: bool = JSON, nats_url: str = nats_url_option()) -> None:
    """An endpoint's spec, load, workers and last scaling step."""
    show(send(nats_url, subjects.query("endpoint.get"), GetEndpoint(name=name), SERVICE), as_json, _render)


@endpoint_app.command("list")
def list_endpoints(namespace: str = typer.Option("", "--namespace", "-n", help="only this namespace"), as_json: bool = JSON,
                   nats_url: str = nats_url_option()) -> None:
    """Every endpoint (of one namespace with -n)."""
    data = send(nats_url, subjects.query("endpoint.list"), ListEndpoints(namespace=namespace), SERVICE)
    show(data, as_json, lambda items: "\n\n".join(_render(e) for e in items) or "no endpoints")


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _workers(workers: list[dict]) -> str:
    return ", ".join(f"{w['claim_id']} ({w['status']})" for w in workers) or "none"


def _render(e: dict) -> str:
    spec, load = e["spec"], e["load"]
    lines = [f"endpoint {spec['name']} ({spec['namespace']}): gpus {','.join(spec.get('gpu_groups', ['any']))}"
             f" x{spec.get('gpus_per_worker', 1)}, workers {spec.get('workers_min', 0)}..{spec.get('workers_max', 3)},"
             f" {spec.get('scaler_type', 'QUEUE_DELAY')} {spec.get('scaler_value', 4)}"
             + (f", image {spec['image']}{' (live: locked)' if spec.get('live') else ''}" if spec.get("image") else ""),
             f"load: {load['queued']} queued, oldest {load['oldest_wait_s']:g}s, {load['requests_per_min']:g}/min",
             f"workers: {_workers(e['workers'])}"]
    if e.get("last_scaled"):
        s = e["last_scaled"]
        lines.append(f"last scaled {s['workers_before']} -> {s['workers_after']}: {s['reason']}")
    return "\n".join(lines)
