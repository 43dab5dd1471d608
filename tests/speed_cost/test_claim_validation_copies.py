"""The claim service's validation copies a claim only to normalise it (services/claim/validation.py):
`gpu_groups: ["ANY"]` is written `["any"]`; every other claim is returned as it came, not rebuilt
(a copy per claim was 0.8 us of the intake's 2.5 us of validation, docs/benchmarks.md, "Session 34,
speed-cost")."""

from __future__ import annotations

import pytest

from schemas.types import ClaimSpec
from services.claim.validation import validate_claim


@pytest.mark.parametrize("fields", [{}, {"gpus": 2}, {"gpu_milli": 500}, {"gpu_groups": ["any"]},
                                    {"gpu_groups": ["AMPERE_80"]}, {"labels": {"team": "x"}}])
def test_a_claim_with_nothing_to_normalise_is_returned_as_it_came(fields):
    spec = ClaimSpec(claim_id="c-1", namespace="team-a", **fields)
    assert validate_claim(spec) is spec


def test_any_in_capitals_is_written_in_lower_case_and_nothing_else_changes():
    spec = ClaimSpec(claim_id="c-1", namespace="team-a", gpus=2, gpu_groups=["ANY"], labels={"k": "v"})
    normalised = validate_claim(spec)
    assert normalised.gpu_groups == ["any"]
    assert normalised == ClaimSpec(claim_id="c-1", namespace="team-a", gpus=2, gpu_groups=["any"], labels={"k": "v"})
    assert spec.gpu_groups == ["ANY"]  # the claim given is left as it was
