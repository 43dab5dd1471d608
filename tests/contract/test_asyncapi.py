"""The AsyncAPI document is valid AsyncAPI 3.0 (the official parser, no error or warning) and names
every subject the services use, with its headers and operations."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from schemas import subjects
from schemas.asyncapi import EVENT_CHANNELS, REQUESTS, SIMULATION_REQUESTS
from schemas.export import OUT
from tests.contract.node import run_node

REPO = Path(__file__).resolve().parents[2]
DOC = OUT / "asyncapi.json"


def _doc() -> dict:
    return json.loads(DOC.read_text())


def test_the_asyncapi_parser_finds_no_error_or_warning():
    result = run_node("validate_asyncapi.mjs", str(DOC))
    assert result["parsed"]
    # severity 0 is an error, 1 a warning; 2 (information) only says 3.1 exists
    serious = [d for d in result["diagnostics"] if d["severity"] < 2]
    assert serious == []
    assert len(result["operations"]) == len(_doc()["operations"])


def _subjects_used_in_code() -> set[str]:
    """Every request subject a service registers: subjects.command("x") / subjects.query("x")."""
    found = set()
    for path in [*REPO.glob("services/**/*.py"), *REPO.glob("shared/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("command", "query") and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "subjects" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                found.add(getattr(subjects, node.func.attr)(node.args[0].value))
    return found


def test_every_request_subject_a_service_answers_is_a_channel_with_a_reply():
    addresses = {c["address"]: (cid, c) for cid, c in _doc()["channels"].items()}
    used = _subjects_used_in_code()
    assert len(used) > 20
    assert used - set(addresses) == set()
    operations = _doc()["operations"]
    for subject in used:
        channel_id = addresses[subject][0]
        assert operations[channel_id]["reply"]["channel"] == {"$ref": "#/channels/replyInbox"}


def test_the_stream_subjects_a_publisher_needs_are_channels_with_their_headers():
    doc = _doc()
    addresses = {c["address"] for c in doc["channels"].values()}
    for needed in (subjects.INTAKE_CLAIMS, "gpu.outcome.claim.{claimToken}", subjects.DECISIONS,
                   subjects.INTAKE_BATCHES, "gpu.evt.claim.{claimToken}", "gpu.evt.deadletter.{source}"):
        assert needed in addresses
    traits = doc["components"]["messageTraits"]
    assert "Nats-Msg-Id" in traits["publish"]["headers"]["properties"]
    assert "Nats-Expected-Last-Subject-Sequence" in traits["fenced"]["headers"]["properties"]
    assert "traceparent" in traits["request"]["headers"]["properties"]
    assert doc["operations"]["publishClaim"]["action"] == "send"
    assert doc["operations"]["readOutcome"]["action"] == "receive"


def test_every_event_type_is_a_message_of_some_channel():
    from schemas.events import AnyEvent

    carried = {m for _, _, messages, _, _ in EVENT_CHANNELS.values() for m in messages}
    batched = {"ClaimAllocated", "ClaimPending", "AllocationRejected", "ClaimEvicted", "AllocationExpired",
               "NodeLost", "QuotaBorrowed", "QuotaReclaimed", "AllocationUnused"}  # inside DecisionBatch only
    assert {t.__name__ for t in AnyEvent.__args__} - carried - batched == set()


def test_the_request_tables_have_no_duplicate_subject():
    names = [s for s, _, _ in REQUESTS] + [s for s, _ in SIMULATION_REQUESTS]
    assert len(names) == len(set(names))
