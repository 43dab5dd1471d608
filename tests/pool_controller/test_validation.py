"""Every pool rule of seed 004, as a table: the spec, the cluster, the field the error names."""

from __future__ import annotations

import pytest

from schemas.types import DeviceSelector, PoolSpec
from services.pool_controller.validation import (
    ClusterFacts,
    immutable_changes,
    parse_version,
    validate_pool,
)

NEW_DRA = ClusterFacts(k8s_version="v1.32.1", dra_enabled=True)
OLD = ClusterFacts(k8s_version="1.31", dra_enabled=True)
NO_FEATURE = ClusterFacts(k8s_version="1.33", dra_enabled=False)
UNKNOWN = ClusterFacts()
MIG_CAPABLE = DeviceSelector(mig_capable=True)

VALID = [
    ("default card pool", {}, UNKNOWN),
    ("time-sliced card pool", {"slices_per_unit": 8}, UNKNOWN),
    ("MIG with time slicing on device-plugin", {"unit": "MIG", "mig_profile": "1g.10gb",
                                                "slices_per_unit": 4}, UNKNOWN),
    ("MIG on device-plugin, any profile", {"unit": "MIG"}, UNKNOWN),
    ("dra card pool on 1.32", {"backend": "dra"}, NEW_DRA),
    ("dra static MIG", {"backend": "dra", "unit": "MIG", "mig_profile": "3g.40gb",
                        "include": MIG_CAPABLE}, NEW_DRA),
    ("spread with a topology key", {"strategy": "Spread", "topology_key": "topology.kubernetes.io/zone"},
     UNKNOWN),
    ("selectors", {"include": DeviceSelector(products=["NVIDIA A100-SXM4-80GB"], pci_vendors=["10de"],
                                             pci_devices=["20b2"], mig_profiles=["1g.10gb"]),
                   "exclude": DeviceSelector(inventory_ids=["node-1/3"])}, UNKNOWN),
    ("access", {"access_namespaces": ["team-a"], "access_service_accounts": ["team-a:trainer",
                "system:serviceaccount:team-b:runner"], "access_groups": ["ml"]}, UNKNOWN),
    ("own resource name", {"resource": "gpu.deckhouse.io/a100"}, UNKNOWN),
    ("node selector", {"node_selector": {"node.kubernetes.io/gpu": "a100"}}, UNKNOWN),
]

INVALID = [
    ("amd provider", {"provider": "amd"}, UNKNOWN, "provider", "only 'nvidia'"),
    ("unknown backend", {"backend": "vgpu"}, UNKNOWN, "backend", "not one of"),
    ("dra on an old cluster", {"backend": "dra"}, OLD, "backend", ">= 1.32"),
    ("dra without the feature", {"backend": "dra"}, NO_FEATURE, "backend", "DynamicResourceAllocation"),
    ("dra with an unknown version", {"backend": "dra"}, UNKNOWN, "backend", "GPULEDGER_K8S_VERSION"),
    ("dra oversubscribed", {"backend": "dra", "slices_per_unit": 2}, NEW_DRA, "slices_per_unit",
     "must be 1"),
    ("dra MIG without mig_capable", {"backend": "dra", "unit": "MIG", "mig_profile": "1g.10gb"},
     NEW_DRA, "include.mig_capable", "statically"),
    ("dra MIG without a profile", {"backend": "dra", "unit": "MIG", "include": MIG_CAPABLE}, NEW_DRA,
     "mig_profile", "static"),
    ("MPS", {"unit": "MPS"}, UNKNOWN, "unit", "isolation"),
    ("unknown unit", {"unit": "Slice"}, UNKNOWN, "unit", "not one of"),
    ("profile on a card pool", {"mig_profile": "1g.10gb"}, UNKNOWN, "mig_profile", "unit MIG"),
    ("malformed profile", {"unit": "MIG", "mig_profile": "big"}, UNKNOWN, "mig_profile", "1g.10gb"),
    ("profile no card has", {"unit": "MIG", "mig_profile": "7g.999gb"}, UNKNOWN, "mig_profile",
     "not a profile"),
    ("unknown strategy", {"strategy": "Random"}, UNKNOWN, "strategy", "BinPack"),
    ("bad topology key", {"strategy": "Spread", "topology_key": "no spaces"}, UNKNOWN, "topology_key",
     "label key"),
    ("negative device limit", {"max_devices_per_node": -1}, UNKNOWN, "max_devices_per_node", "0"),
    ("resource without domain", {"resource": "a100"}, UNKNOWN, "resource", "domain"),
    ("bad node selector key", {"node_selector": {"bad key": "x"}}, UNKNOWN, "node_selector.bad key",
     "label key"),
    ("bad pci vendor", {"include": DeviceSelector(pci_vendors=["NVIDIA"])}, UNKNOWN,
     "include.pci_vendors", "hex"),
    ("bad mig profile selector", {"exclude": DeviceSelector(mig_profiles=["half"])}, UNKNOWN,
     "exclude.mig_profiles", "MIG profile"),
    ("empty product", {"include": DeviceSelector(products=[" "])}, UNKNOWN, "include.products", "empty"),
    ("included and excluded", {"include": DeviceSelector(products=["A100"]),
                               "exclude": DeviceSelector(products=["A100"])}, UNKNOWN,
     "exclude.products", "also in include"),
    ("bad namespace", {"access_namespaces": ["Team_A"]}, UNKNOWN, "access_namespaces", "namespace"),
    ("bad service account", {"access_service_accounts": ["trainer"]}, UNKNOWN,
     "access_service_accounts", "<namespace>:<name>"),
]


@pytest.mark.parametrize("case, fields, facts", VALID, ids=[c[0] for c in VALID])
def test_a_valid_pool_has_no_problems(case, fields, facts):
    assert validate_pool(PoolSpec(name="p", **fields), facts) == []


@pytest.mark.parametrize("case, fields, facts, field, words", INVALID, ids=[c[0] for c in INVALID])
def test_an_invalid_pool_names_the_field_and_the_problem(case, fields, facts, field, words):
    problems = validate_pool(PoolSpec(name="p", **fields), facts)
    assert problems, case
    assert problems[0].field == field
    assert words in problems[0].message


def test_out_of_range_slices_are_refused_even_when_built_without_msgspec_checks():
    pool = PoolSpec(name="p", slices_per_unit=65)  # the constructor does not run Meta checks
    assert [p.field for p in validate_pool(pool, UNKNOWN)] == ["slices_per_unit"]


def test_every_problem_is_listed_not_only_the_first():
    pool = PoolSpec(name="p", provider="amd", strategy="Random", unit="MPS")
    assert {p.field for p in validate_pool(pool, UNKNOWN)} == {"provider", "strategy", "unit"}


@pytest.mark.parametrize("change, expected", [
    ({"access_namespaces": ["x"], "access_service_accounts": ["x:y"], "access_groups": ["g"]}, []),
    ({"slices_per_unit": 2}, ["slices_per_unit"]),
    ({"backend": "dra", "unit": "MIG"}, ["backend", "unit"]),
    ({"include": DeviceSelector(products=["A100"])}, ["include"]),
    ({"node_selector": {"a": "b"}}, ["node_selector"]),
    ({"resource": "x.io/y", "provider": "amd"}, ["provider", "resource"]),
    ({"max_devices_per_node": 2, "mig_profile": "1g.10gb"}, ["mig_profile", "max_devices_per_node"]),
])
def test_only_access_may_change_after_creation(change, expected):
    stored = PoolSpec(name="p")
    assert sorted(immutable_changes(stored, PoolSpec(name="p", **change))) == sorted(expected)


@pytest.mark.parametrize("text, version", [("v1.32.0", (1, 32)), ("1.31", (1, 31)),
                                           ("1.33+", (1, 33)), ("", None), ("latest", None)])
def test_cluster_versions_are_read_as_major_minor(text, version):
    assert parse_version(text) == version
