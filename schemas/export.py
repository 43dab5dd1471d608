"""Generate JSON Schema (and a small AsyncAPI document) from the msgspec Structs."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from schemas import commands, subjects
from schemas.events import AnyEvent
from schemas.types import ClaimSpec

OUT = Path(__file__).parent / "json"

COMMANDS = (commands.SubmitClaim, commands.ReleaseClaim, commands.RenewLease, commands.ReportActivity,
            commands.GetClaim, commands.ListClaims, commands.SetQuota, commands.ApplyQuotas,
            commands.SetDefaultQuota,
            commands.DeleteQuota,
            commands.GetQuota, commands.CreatePool, commands.UpdatePool, commands.DeletePool,
            commands.CreateEndpoint, commands.DeleteEndpoint, commands.ReportEndpointLoad, commands.Reply)


def documents() -> dict[str, dict]:
    docs = {
        "events.json": msgspec.json.schema(AnyEvent),
        "claim.json": msgspec.json.schema(ClaimSpec),
    }
    for command in COMMANDS:
        docs[f"command.{command.__name__}.json"] = msgspec.json.schema(command)
    docs["asyncapi.json"] = _asyncapi()
    return docs


def _asyncapi() -> dict:
    return {
        "asyncapi": "3.0.0",
        "info": {"title": "gpuledger", "version": "1"},
        "channels": {
            "intake": {"address": subjects.INTAKE_CLAIMS, "messages": {"claim": {"$ref": "claim.json"}},
                       "description": "Publish a JSON ClaimSpec (JetStream, durable, idempotent on claim_id)."},
            "events": {"address": subjects.EVENTS, "messages": {"event": {"$ref": "events.json"}},
                       "description": f"The event log (stream {subjects.STREAM})."},
            "submit": {"address": subjects.command("claim.submit"),
                       "messages": {"command": {"$ref": "command.SubmitClaim.json"}},
                       "description": "Request/reply; the answer is a Reply."},
        },
    }


def _render(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def write_schemas(out: Path | None = None) -> list[Path]:
    folder = out or OUT
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, doc in documents().items():
        path = folder / name
        path.write_text(_render(doc))
        written.append(path)
    return written


def check_schemas(folder: Path | None = None) -> list[str]:
    """Names of files that are missing or differ from what the types generate."""
    folder = folder or OUT
    stale = []
    for name, doc in documents().items():
        path = folder / name
        if not path.exists() or path.read_text() != _render(doc):
            stale.append(name)
    return stale
