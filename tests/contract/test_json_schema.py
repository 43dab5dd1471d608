"""The JSON Schema files compile where publishers use them: Python's jsonschema and ajv's strict mode."""

from __future__ import annotations

import json

import jsonschema
import pytest

from schemas.export import OUT, json_schemas
from schemas.jsonschema import DIALECT
from tests.contract.node import run_node

SCHEMA_FILES = sorted(json_schemas())


def _load(name: str) -> dict:
    return json.loads((OUT / name).read_text())


@pytest.mark.parametrize("name", SCHEMA_FILES)
def test_each_file_declares_draft_2020_12_and_an_id(name):
    doc = _load(name)
    assert doc["$schema"] == DIALECT
    assert doc["$id"].startswith("urn:gpuledger:schema:")


@pytest.mark.parametrize("name", SCHEMA_FILES)
def test_each_file_is_a_valid_2020_12_schema_for_python_jsonschema(name):
    jsonschema.Draft202012Validator.check_schema(_load(name))


def test_no_file_uses_a_keyword_strict_validators_refuse():
    text = "".join((OUT / name).read_text() for name in SCHEMA_FILES)
    assert '"discriminator"' not in text and '"mapping"' not in text


def test_every_file_compiles_in_ajv_strict_mode():
    verdicts = run_node("compile_schemas.mjs", str(OUT))
    assert set(verdicts) >= set(SCHEMA_FILES)
    failed = {name: why for name, why in verdicts.items() if why != "ok"}
    assert failed == {}


def test_an_event_names_its_type_and_is_checked_against_that_type_only():
    validator = jsonschema.Draft202012Validator(_load("events.json"))
    bad = {"type": "ClaimReleased"}  # claim_id missing
    errors = list(validator.iter_errors(bad))
    assert [e.message for e in errors] == ["'claim_id' is a required property"]
    assert not list(validator.iter_errors({"type": "ClaimReleased", "claim_id": "c"}))
    assert list(validator.iter_errors({"type": "NoSuchEvent"}))


def test_the_outcome_schema_requires_every_field():
    outcome = _load("outcome.json")["$defs"]["ClaimOutcome"]
    # every field of v1 as published; one added since has a default (an outcome written before
    # it lacks it), the writer writes it always
    additive = {"system"}
    assert set(outcome["required"]) == set(outcome["properties"]) - additive
    assert all(outcome["properties"][name]["default"] == "" for name in additive)
