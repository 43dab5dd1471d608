"""The JSON Schema files other systems build against are generated from the msgspec types."""

from __future__ import annotations

import json

import msgspec

from schemas.events import AnyEvent, ClaimSubmitted, decode_event, encode_event
from schemas.export import OUT, check_schemas, documents
from schemas.types import ClaimSpec


def test_checked_in_json_schema_matches_the_types():
    stale = check_schemas()
    assert stale == [], f"regenerate with `make schemas`: {stale}"


def test_every_event_type_is_in_the_schema():
    names = {t.__name__ for t in AnyEvent.__args__}
    defs = set(json.loads((OUT / "events.json").read_text())["$defs"])
    assert names <= defs


def test_the_readme_claim_validates_and_round_trips():
    raw = b'{"claim_id": "train-42", "namespace": "team-b", "gpus": 4, "models": ["H100"]}'
    spec = msgspec.json.decode(raw, type=ClaimSpec)
    event = ClaimSubmitted(claim=spec, at=1.0)
    assert decode_event(encode_event(event)) == event


def test_documents_cover_commands_and_asyncapi():
    docs = documents()
    assert "command.SubmitClaim.json" in docs and "asyncapi.json" in docs
