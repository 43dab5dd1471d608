"""Generate the contract files in schemas/json: JSON Schema 2020-12 for claims, events, outcomes and
commands, and the AsyncAPI 3.0 document (`make schemas`; a test fails when they are stale)."""

from __future__ import annotations

import json
from pathlib import Path

from schemas import commands
from schemas.asyncapi import asyncapi_document
from schemas.claim_rules import claim_rules
from schemas.events import AnyEvent
from schemas.jsonschema import closed_structs, schema_of
from schemas.outcomes import ClaimOutcome
from schemas.seed import SeedClaimSpec, SeedEndpointSpec
from schemas.types import ClaimSpec, EndpointSpec

OUT = Path(__file__).parent / "json"

COMMANDS = (commands.SubmitClaim, commands.ReleaseClaim, commands.RenewLease, commands.ReportActivity,
            commands.GetClaim, commands.ListClaims, commands.SetQuota, commands.ApplyQuotas,
            commands.SetDefaultQuota, commands.DeleteQuota,
            commands.GetQuota, commands.ListQuotas, commands.GetQuotaStatus, commands.CreatePool,
            commands.UpdatePool, commands.DeletePool, commands.GetPool, commands.ListPools, commands.RenderPool, commands.SetFleetDefaults, commands.IgnoreDevice,
            commands.CreateEndpoint, commands.UpdateEndpoint, commands.DeleteEndpoint, commands.GetEndpoint,
            commands.ListEndpoints, commands.ReportEndpointLoad, commands.AcquireSlot,
            commands.FinishSlotRequest, commands.ListSlots, commands.CleanupSlots, commands.Query, commands.Reply)

# Every spelling of a claim and the Struct it is (a second spelling, e.g. camelCase, adds a line).
CLAIM_SPELLINGS: dict[str, type] = {"ClaimSpec": ClaimSpec, "SeedClaimSpec": SeedClaimSpec}
# Where a claim or an endpoint may come in either spelling: the file, the property holding it
# ("" for the document itself), the canonical Struct and the seed's (schemas/seed.py).
EITHER_SPELLING = (("claim.json", "", ClaimSpec, SeedClaimSpec),
                   ("command.SubmitClaim.json", "claim", ClaimSpec, SeedClaimSpec),
                   ("command.CreateEndpoint.json", "endpoint", EndpointSpec, SeedEndpointSpec),
                   ("command.UpdateEndpoint.json", "endpoint", EndpointSpec, SeedEndpointSpec))


def json_schemas() -> dict[str, dict]:
    """File name -> JSON Schema document."""
    docs = {
        "claim.json": _document(ClaimSpec, "claim.json", "A claim, as published to gpu.intake.claim"),
        "events.json": _document(AnyEvent, "events.json", "Any event of the log (stream GPULEDGER)"),
        "outcome.json": _document(ClaimOutcome, "outcome.json",
                                  "A claim's outcome (stream GPULEDGER_OUTCOMES, gpu.outcome.claim.<token>; "
                                  "a publishing system's claim: gpu.outcome.system.<system>.<token>)"),
    }
    for command in COMMANDS:
        name = f"command.{command.__name__}.json"
        docs[name] = _document(command, name, f"{command.__name__} ({_doc_line(command)})")
    for name, prop, canonical, seed in EITHER_SPELLING:
        _either_spelling(docs[name], prop, canonical, seed)
    return docs


def _either_spelling(doc: dict, prop: str, canonical: type, seed: type) -> None:
    """Let `prop` (or the document) be either spelling: the seed's Struct beside ours, `oneOf` the
    two (a claim is one or the other: each requires its own claim id name and forbids the other)."""
    seed_doc = _document(seed, "x.json", "x")
    doc["$defs"].update(seed_doc["$defs"])
    either = {"anyOf": [{"$ref": f"#/$defs/{canonical.__name__}"}, {"$ref": f"#/$defs/{seed.__name__}"}]}
    if prop:
        doc["$defs"][doc["$ref"].rsplit("/", 1)[1]]["properties"][prop] = either
    else:
        del doc["$ref"]
        doc.update(either)


def documents() -> dict[str, dict]:
    docs = json_schemas()
    docs["asyncapi.json"] = asyncapi_document(docs)
    return docs


def _document(types, file_name: str, title: str) -> dict:
    roots = getattr(types, "__args__", None) or (types,)
    doc = schema_of(types, file_name, title, closed_structs(*roots))
    for name, struct in CLAIM_SPELLINGS.items():
        definition = doc.get("$defs", {}).get(name)
        if definition is not None:
            definition["allOf"] = claim_rules(struct, published=file_name != "events.json")
    return doc


def _doc_line(struct: type) -> str:
    return ((struct.__doc__ or "").strip().splitlines() or ["a command"])[0].rstrip(".")


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
