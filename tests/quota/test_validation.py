"""SetQuota validation: requests not above limits, single not above total, hierarchy one level."""

from __future__ import annotations

import pytest

from schemas.commands import SetQuota

from services.quota.quantities import QuantityError
from services.quota.validation import spec_from_command

SEED = dict(requests_tflops="1000", requests_vram="100Gi", limits_tflops="2000", limits_vram="200Gi",
            max_workers=50, alert_threshold_percent=95, single_max_requests_tflops="100",
            single_max_requests_vram="16Gi", single_max_limits_tflops="200",
            single_max_limits_vram="32Gi", single_max_gpu_count=8)


def test_the_seed_quota_is_accepted_in_counted_units():
    spec = spec_from_command(SetQuota(namespace="team-a", **SEED), {})
    assert spec.total.requests.tflops == 1000.0 and spec.total.requests.vram_mib == 100 * 1024
    assert spec.total.limits.vram_mib == 200 * 1024 and spec.total.max_workers == 50
    assert spec.single.max_requests.vram_mib == 16 * 1024 and spec.single.max_gpu_count == 8
    assert spec.total.alert_threshold_percent == 95.0
    assert spec.borrowing_limit.tflops == 0.0 and spec.borrowing_limit.vram_mib == 0


def test_unset_fields_mean_no_limit():
    spec = spec_from_command(SetQuota(namespace="team-a", requests_vram="64Gi"), {})
    assert spec.total.requests.tflops is None and spec.total.max_workers is None
    assert spec.single.max_gpu_count is None


@pytest.mark.parametrize("fields, field", [
    (dict(requests_vram="300Gi", limits_vram="200Gi"), "requests_vram"),
    (dict(requests_tflops=3000, limits_tflops=2000), "requests_tflops"),
    (dict(single_max_requests_vram="64Gi", single_max_limits_vram="32Gi"), "single_max_requests_vram"),
    (dict(single_max_requests_tflops=300, single_max_limits_tflops=200), "single_max_requests_tflops"),
    (dict(requests_vram="100Gi", single_max_requests_vram="128Gi"), "single_max_requests_vram"),
    (dict(limits_vram="100Gi", single_max_limits_vram="128Gi"), "single_max_limits_vram"),
    (dict(requests_tflops=100, single_max_requests_tflops=101), "single_max_requests_tflops"),
    (dict(limits_tflops=100, single_max_limits_tflops=101), "single_max_limits_tflops"),
    (dict(limits_vram="10Gi", single_max_requests_vram="16Gi"), "single_max_requests_vram"),
    (dict(requests_vram="16"), "requests_vram"),
    (dict(limits_tflops="-3"), "limits_tflops"),
    (dict(max_workers=-1), "max_workers"),
    (dict(single_max_gpu_count=-2), "single_max_gpu_count"),
    (dict(alert_threshold_percent=0), "alert_threshold_percent"),
    (dict(alert_threshold_percent=101), "alert_threshold_percent"),
    (dict(borrowing_limit_vram="8Gi"), "borrowing_limit_vram"),
    (dict(parent="Team X"), "parent"),
    (dict(parent="team-a"), "parent"),
])
def test_inconsistent_quotas_are_refused_naming_the_field(fields, field):
    with pytest.raises(QuantityError) as err:
        spec_from_command(SetQuota(namespace="team-a", **fields), {})
    assert err.value.field == field, err.value


def test_the_refusal_says_which_side_is_too_big():
    with pytest.raises(QuantityError) as err:
        spec_from_command(SetQuota(namespace="team-a", requests_vram="300Gi", limits_vram="200Gi"), {})
    assert err.value.message == "300Gi is above limits_vram 200Gi"


def test_a_bad_namespace_is_refused():
    with pytest.raises(QuantityError) as err:
        spec_from_command(SetQuota(namespace="Team_A!"), {})
    assert err.value.field == "namespace"


def test_borrowing_needs_a_parent_and_may_be_unlimited():
    spec = spec_from_command(SetQuota(namespace="team-a", parent="team-x", borrowing_limit_vram="unlimited",
                                      borrowing_limit_tflops=100), {})
    assert spec.parent == "team-x"
    assert spec.borrowing_limit.vram_mib is None and spec.borrowing_limit.tflops == 100.0
    default = spec_from_command(SetQuota(namespace="team-b", parent="team-x"), {})
    assert default.borrowing_limit.vram_mib == 0  # a child borrows nothing unless allowed to


def test_hierarchies_are_one_level_deep():
    quotas = {"team-x": spec_from_command(SetQuota(namespace="team-x", parent="org"), {}),
              "team-a": spec_from_command(SetQuota(namespace="team-a", parent="cohort"), {})}
    with pytest.raises(QuantityError, match="itself a child of org"):
        spec_from_command(SetQuota(namespace="team-b", parent="team-x"), quotas)
    with pytest.raises(QuantityError, match="parent of team-a"):
        spec_from_command(SetQuota(namespace="cohort", parent="org"), quotas)
    spec_from_command(SetQuota(namespace="cohort", requests_vram="1Ti"), quotas)  # a parent may be set
