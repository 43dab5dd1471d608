"""Issue 11 item 3: GPU types and prices from a data file an operator edits; picking by budget
and by model size; `gpuledger gpus` with live availability from a real claim service."""

from __future__ import annotations

import json

import pytest

from schemas import subjects
from schemas.catalogue import CATALOGUE
from schemas.gpu_types import (ENV, GpuTypesError, for_model, groups_of, load_gpu_types, model_memory_gib,
                               within_budget)
from tests.cli import run_cli
from tests.service.helpers import h100_node, register_nodes, request, running


def test_the_shipped_file_has_every_grouped_model_with_illustrative_prices():
    data = load_gpu_types()
    assert data.prices_are == "illustrative"
    assert {t.model for t in data.gpu_types} == {m.name for m in CATALOGUE if m.group}
    h100 = next(t for t in data.gpu_types if t.model == "H100")
    assert h100.group == "ADA_80_PRO" and h100.maxGpuCount == 8
    assert h100.price("spot") < h100.price("on-demand") <= h100.price("secure")


def _write(tmp_path, text: str):
    path = tmp_path / "types.yaml"
    path.write_text(text)
    return path


def test_an_operator_edits_prices_without_code_changes(tmp_path, monkeypatch):
    path = _write(tmp_path, """
gpu_types:
  - {model: H100, id: "NVIDIA H100 80GB HBM3", displayName: H100, memoryInGb: 80, maxGpuCount: 8,
     secureCloud: true, securePrice: 0.5, lowestPrice: {minimumBidPrice: 0.25, uninterruptablePrice: 0.4}}
  - {model: A100, id: "NVIDIA A100", displayName: A100, memoryInGb: 80, maxGpuCount: 4,
     lowestPrice: {uninterruptablePrice: 0.9}}
""")
    monkeypatch.setenv(ENV, str(path))
    types = load_gpu_types().gpu_types
    cheap = within_budget(types, 1.0, gpus=2)
    assert [(o.type.model, o.gpus, o.per_hour) for o in cheap] == [("H100", 2, 0.8)]
    assert within_budget(types, 10.0, gpus=8)[0].type.model == "H100"  # A100 nodes hold only 4
    assert [o.type.model for o in within_budget(types, 10.0, gpus=8)] == ["H100"]


@pytest.mark.parametrize("text, words", [
    ("gpu_types:\n  - {model: H1000, id: x, displayName: x, memoryInGb: 80}\n", "gpu_types[0].model: 'H1000'"),
    ("gpu_types:\n  - {model: H100, id: x, displayName: x, memoryInGb: 80, securePrice: -1}\n",
     "`$.gpu_types[0].securePrice`"),
    ("gpu_types:\n  - {model: H100, id: x, displayName: x, memoryInGb: 80, colour: red}\n", "colour"),
    ("gpu_types: [\n", "not YAML"),
])
def test_a_bad_file_is_refused_naming_the_entry_and_field(tmp_path, text, words):
    with pytest.raises(GpuTypesError) as err:
        load_gpu_types(_write(tmp_path, text))
    assert words in str(err.value) and "types.yaml" in str(err.value)


def test_model_sizes_in_parameters_or_memory():
    assert model_memory_gib("70B") == 156.5  # 70e9 x 2 bytes x 1.2, in GiB
    assert model_memory_gib("70b", "int4") == 39.1
    assert model_memory_gib("40GiB") == model_memory_gib("40") == 40
    for bad in ("seventy", "0B", "-3GiB"):
        with pytest.raises(ValueError):
            model_memory_gib(bad)


def test_a_model_size_suggests_groups_and_gpu_counts():
    types = load_gpu_types().gpu_types
    small = {o.type.model: o.gpus for o in for_model(types, model_memory_gib("7B"))}
    assert small["RTX4090"] == small["L4"] == small["H100"] == 1  # 15.6 GiB: one 24 GiB card holds it
    assert small["RTXA4000"] == 2  # 90% of a 16 GiB card does not
    assert {"AMPERE_24", "ADA_24"} <= set(groups_of(for_model(types, 15.6)))
    big = {o.type.model: o.gpus for o in for_model(types, model_memory_gib("70B"))}
    assert big["H100"] == 4 and big["H200"] == 2 and big["RTX4090"] == 8
    huge = for_model(types, model_memory_gib("405B"))  # 905 GiB: only 8 x H200 holds it on one node
    assert [(o.type.model, o.gpus) for o in huge] == [("H200", 8)]
    assert for_model(types, 5000) == []


async def test_gpus_shows_live_availability_from_the_fleet(fresh_nats, tmp_path):
    async with running(fresh_nats.url, "claim", "allocator", endpoint_tick_s=0) as contexts:
        import nats

        nc = await nats.connect(fresh_nats.url)
        from shared.jetstream import JetStreamEventLog
        await register_nodes(JetStreamEventLog(nc), h100_node("node-a"), h100_node("node-b"))
        claim = {"claim_id": "hold-3", "namespace": "team-a", "gpus": 3, "models": ["H100"]}
        assert (await request(nc, subjects.command("claim.submit"), {"claim": claim, "wait_seconds": 10}))["ok"]
        live = (await request(nc, subjects.query("gpus.availability"), {}))["data"]
        assert live["H100"] == {"cards": 16, "free": 13, "healthy": 16, "mig_instances": 0, "mig_free": 0,
                                "nodes": 2, "max_per_node": 8, "free_at_cap": 0, "nodes_at_cap": 0,
                                "nodes_over_cap": 0}
        cli = await run_cli("gpus", "--json", "--budget", "20", "--count", "8", "--nats-url", fresh_nats.url)
        await nc.close()
    assert cli.returncode == 0, cli.stderr
    out = json.loads(cli.stdout)
    h100 = next(r for r in out["types"] if r["model"] == "H100")
    assert h100["fleet"] == {"free": 13, "cards": 16, "max_per_node": 8} and h100["gpus"] == 8
    assert out["prices_are"] == "illustrative" and all(r["perHour"] <= 20 for r in out["types"])
    assert next(r for r in out["types"] if r["model"] == "A100")["fleet"]["cards"] == 0
