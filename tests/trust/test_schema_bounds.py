"""Numbers are bounded in the JSON Schema publishers validate with (issue 16, "No poison"), not
only in the intake: the checked-in claim schema refuses the values that once crashed every
allocator (`limit_vram_gib: 1e307`, `gpu_memory_gib: 1.7e308`) and the other extremes, naming the
field, and accepts the bounds themselves."""

from __future__ import annotations

import json

import jsonschema
import pytest

from schemas.export import OUT

CLAIM = {"claim_id": "c1", "namespace": "team-a", "gpus": 1}
TOO_LARGE = [("limit_vram_gib", 1e307), ("gpu_memory_gib", 1.7e308), ("gpu_tflops", 1e300),
             ("model_memory_gib", 1e20), ("lease_seconds", 10 ** 12), ("cpu_milli", 2 ** 62)]


@pytest.fixture(scope="module")
def validator():
    return jsonschema.Draft202012Validator(json.loads((OUT / "claim.json").read_text()))


@pytest.mark.parametrize("field,value", TOO_LARGE, ids=[f for f, _ in TOO_LARGE])
def test_an_extreme_number_is_refused_by_the_schema_naming_its_field(validator, field, value):
    errors = list(validator.iter_errors({**CLAIM, field: value}))
    assert errors, f"{field}={value} passed the schema"
    assert field in _fields(errors), [e.message for e in errors]


def _fields(errors) -> set:
    """Every property any error of the tree (an `anyOf`'s branches included) is about."""
    out = set()
    for error in errors:
        out.update(p for p in error.absolute_path if isinstance(p, str))
        out |= _fields(error.context or [])
    return out


def test_the_bounds_themselves_pass(validator):
    assert not list(validator.iter_errors({**CLAIM, "gpu_memory_gib": 4096, "limit_vram_gib": 262144,
                                           "lease_seconds": 366 * 24 * 3600}))
