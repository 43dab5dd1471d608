"""SetQuota validation: requests not above limits, single not above total, trees without loops."""

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


def test_trees_may_be_deep_but_never_loop():
    quotas = {"org": spec_from_command(SetQuota(namespace="org", requests_vram="1Ti"), {}),
              "team-x": spec_from_command(SetQuota(namespace="team-x", parent="org"), {})}
    quotas["team-a"] = spec_from_command(SetQuota(namespace="team-a", parent="team-x"), quotas)
    assert quotas["team-a"].parent == "team-x"  # three levels: team-a -> team-x -> org
    with pytest.raises(QuantityError) as err:
        spec_from_command(SetQuota(namespace="org", parent="team-a"), quotas)
    assert err.value.field == "parent"
    assert err.value.message == ("team-a is below org in the quota tree (org -> team-a -> team-x -> org): "
                                 "a quota cannot be its own ancestor")


@pytest.mark.parametrize("fields, field, message", [
    (dict(lending_limit_vram="8Gi"), "lending_limit_vram", "lending needs a parent"),
    (dict(parent="x", requests_vram="8Gi", lending_limit_vram="16Gi"), "lending_limit_vram",
     "16Gi is above requests_vram 8Gi"),
    (dict(parent="x", lending_limit_tflops="lots"), "lending_limit_tflops", "not a number of TFLOPS"),
    (dict(parent="x", fair_sharing_weight=-1), "fair_sharing_weight", "from 0 to 1000000"),
])
def test_lending_limits_and_weights_are_checked(fields, field, message):
    with pytest.raises(QuantityError) as err:
        spec_from_command(SetQuota(namespace="team-a", **fields), {})
    assert err.value.field == field and message in err.value.message


def test_a_lending_limit_is_kept_and_unset_means_everything_may_be_lent():
    spec = spec_from_command(SetQuota(namespace="team-a", parent="x", requests_vram="80Gi",
                                      lending_limit_vram="16Gi", fair_sharing_weight=2), {})
    assert spec.lending_limit.vram_mib == 16 * 1024 and spec.lending_limit.tflops is None
    assert spec.fair_sharing_weight == 2.0
    assert spec_from_command(SetQuota(namespace="team-b", parent="x"), {}).lending_limit.vram_mib is None


def test_an_admin_may_let_a_namespace_preempt_across_namespaces_and_only_with_a_boolean():
    assert spec_from_command(SetQuota(namespace="ns"), {}).preempt_other_namespaces is False
    assert spec_from_command(SetQuota(namespace="ns", preempt_other_namespaces=True), {}).preempt_other_namespaces
    with pytest.raises(QuantityError) as refused:  # a manifest's "yes" is not taken for true
        spec_from_command(SetQuota(namespace="ns", preempt_other_namespaces="yes"), {})
    assert refused.value.field == "preempt_other_namespaces" and "true or false" in str(refused.value)
