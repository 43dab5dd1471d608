"""`gpuledger slot acquire|finish|list|cleanup`: Helix model slots (claim service)."""

from __future__ import annotations

import typer

from gpuledger_cli.command_client import command_group, json_option, nats_url_option, send, show
from schemas import subjects
from schemas.commands import AcquireSlot, CleanupSlots, FinishSlotRequest, ListSlots

SERVICE = "claim"
slot_app, register = command_group("slot", "Model slots (Helix): requests go to a warm slot of the same "
                                   "model, runtime and LoRA adapter with room, else to a new slot.")
JSON = json_option()


@slot_app.command("acquire")
def acquire(
    model: str = typer.Argument(..., help="A model of the operator's models file (GPULEDGER_MODELS)."),
    lora: str = typer.Option("", "--lora", help="LoRA adapter; empty for the base model."),
    namespace: str = typer.Option("default", "--namespace", "-n", help="namespace a new slot is charged to"),
    request_id: str = typer.Option("", "--request-id", help="Your id for the request (a retry with the "
                                   "same id counts once); empty: the service makes one."),
    as_json: bool = JSON,
    nats_url: str = nats_url_option(),
) -> None:
    """Start a request on a slot of MODEL: a warm one with room, else a new slot (a claim)."""
    data = send(nats_url, subjects.command("slot.acquire"),
                AcquireSlot(model=model, lora=lora, namespace=namespace, request_id=request_id), SERVICE)
    show(data, as_json, lambda d: f"request {d['request_id']} on {'warm' if d['warm'] else 'new'} "
                                  f"{_render(d)}")


@slot_app.command("finish")
def finish(
    slot_id: str = typer.Argument(..., help="The slot the request ran on."),
    request_id: str = typer.Option("", "--request-id", help="The request that finished; empty: the "
                                   "oldest running on the slot."),
    as_json: bool = JSON,
    nats_url: str = nats_url_option(),
) -> None:
    """A request on SLOT_ID finished: its concurrency is free again."""
    data = send(nats_url, subjects.command("slot.finish"), FinishSlotRequest(slot_id=slot_id, request_id=request_id),
                SERVICE)
    show(data, as_json, lambda d: f"request {d['request_id']} finished on {_render(d)}")


@slot_app.command("list")
def list_slots(model: str = typer.Option("", "--model", help="only slots of this model"), as_json: bool = JSON,
               nats_url: str = nats_url_option()) -> None:
    """The live slots: model, runtime, adapter, GPUs, requests running, status."""
    data = send(nats_url, subjects.query("slot.list"), ListSlots(model=model), SERVICE)
    show(data, as_json, lambda items: "\n".join(_render(s) for s in items) or "no slots")


@slot_app.command("cleanup")
def cleanup(stale_after: float = typer.Option(0.0, "--stale-after", min=0, help="Seconds idle that make a slot "
                                              "stale; 0: the configured GPULEDGER_SLOT_STALE_S."),
            as_json: bool = JSON, nats_url: str = nats_url_option()) -> None:
    """Release the stale slots now (the clean-up timer does it too)."""
    data = send(nats_url, subjects.command("slot.cleanup"), CleanupSlots(stale_after_s=stale_after), SERVICE)
    show(data, as_json, lambda d: f"released {', '.join(d['released']) or 'nothing'}")


def _render(s: dict) -> str:
    adapter = f" + {s['lora']}" if s.get("lora") else ""
    where = f" on {s['node']}" if s.get("node") else ""
    return (f"slot {s['slot_id']}: {s['model']}{adapter} ({s['runtime']}), {s['gpus']} GPU x "
            f"{s['memory_per_gpu_gib']:g} GiB, {s['active']}/{s['max_concurrency']} requests, {s['status']}{where}")
