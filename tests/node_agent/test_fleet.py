"""The fleet spec: what the default demo fleet is, and a clear error for every bad spec."""

import pytest

from services.node_agent.fleet import DEFAULT_FLEET, FleetSpecError, parse_fleet


def test_the_default_fleet_is_four_h100_nodes_in_two_islands_and_one_mig_a100_node():
    nodes = parse_fleet(DEFAULT_FLEET)
    assert [n.name for n in nodes] == ["sim-h100-0", "sim-h100-1", "sim-h100-2", "sim-h100-3", "sim-a100-0"]
    h100, a100 = nodes[0], nodes[-1]
    assert (h100.model.name, h100.gpus, h100.islands, h100.mig_layouts) == ("H100", 8, 2, ())
    assert (a100.model.name, a100.gpus) == ("A100", 4)
    assert [a100.mig_layout(i) for i in range(4)] == [
        ("1g.10gb",) * 7, ("3g.40gb", "4g.40gb"), ("2g.20gb",) * 3 + ("1g.10gb",), ("3g.40gb",) * 2]
    assert h100.cuda_version == "12.8" and h100.driver_version.startswith("570.")
    assert h100.labels["gpu-model"] == "H100" and h100.labels["zone"] == "zone-a"
    assert nodes[1].labels["zone"] == "zone-b"
    assert h100.cpu_milli > 0 and h100.memory_mib > 0


def test_options_set_layout_zone_prefix_resources_and_cuda():
    (node,) = parse_fleet("1xA100x2:mig=2x3g.40gb/7g.80gb:zone=eu-1:name=lab:cpu=64:mem=512:cuda=12.4")
    assert node.name == "lab-0"
    assert node.mig_layout(0) == ("3g.40gb", "3g.40gb") and node.mig_layout(1) == ("7g.80gb",)
    assert node.labels["zone"] == "eu-1" and node.labels["mig"] == "true"
    assert (node.cpu_milli, node.memory_mib) == (64_000, 512 * 1024)
    assert (node.cuda_version, node.driver_version) == ("12.4", "550.127.05")


def test_groups_of_one_model_are_numbered_on():
    names = [n.name for n in parse_fleet("1xH100x8,2xH100x4:islands=0")]
    assert names == ["sim-h100-0", "sim-h100-1", "sim-h100-2"]


@pytest.mark.parametrize("spec, words", [
    ("", ["empty"]),
    ("4xH100", ["COUNTxMODELxGPUS"]),
    ("0xH100x8", ["node count", "1..1000"]),
    ("1xH100x17", ["GPUs per node", "1..16"]),
    ("1xB999x8", ["unknown GPU model", "'B999'"]),
    ("1xG1x4", ["no NVML product name"]),
    ("2xH100x8:islands=3", ["islands=3", "does not divide"]),
    ("1xH100x8:islands=x", ["islands", "whole number"]),
    ("1xH100x8:colour=red", ["unknown option", "'colour'"]),
    ("1xL40Sx4:mig", ["L40S", "does not support MIG"]),
    ("1xA100x4:mig=8g.80gb", ["'8g.80gb'", "not valid on A100"]),
    ("1xA100x4:mig=7x1g.10gb+1g.10gb", ["8/7 compute"]),
    ("1xA100x4:mig=2x4g.40gb", ["8/7 compute"]),
    ("1xA100x4:mig=3g.40gb+1g.20gb+4g.40gb", ["10/8 memory"]),
    ("1xA100x4:mig=three", ["'three'", "[Nx]PROFILE"]),
    ("1xH100x8:cuda=11.0", ["cuda must be one of"]),
    ("1xH100x8:zone=Zone A", ["zone", "lower-case"]),
    ("1xH100x8,nonsense", ["'nonsense'"]),
])
def test_a_bad_spec_is_refused_naming_the_group_and_the_problem(spec, words):
    with pytest.raises(FleetSpecError) as err:
        parse_fleet(spec)
    for word in words:
        assert word in str(err.value)
