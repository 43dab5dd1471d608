"""Model-bound variants are deterministic by seed and bind what they say; the paired comparison
runs both policies on the same workloads and reports the per-seed difference."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from gpuledger_cli.main import app
from simulator.compare import compare, variant_names, variant_traces
from simulator.trace import read_trace
from simulator.variants import model_bound, variants

NODES = ["sn,cpu_milli,memory_mib,gpu,model", "n0,32000,131072,8,G2", "n1,32000,131072,8,G2",
         "n2,16000,65536,2,T4", "n3,64000,262144,4,V100M32", "n4,8000,32768,1,V100M16"]


@pytest.fixture
def fleet(write, small_trace):
    nodes = write("fleet.csv", NODES[0], NODES[1:])
    return read_trace(nodes, small_trace[1])


def test_model_bound_binds_the_share_of_gpu_pods_to_models_that_can_hold_them(fleet):
    pods = list(fleet.pods) * 10  # 160 GPU pods
    pods = [replace(p, name=f"{p.name}-{i}", models=()) for i, p in enumerate(pods)]
    bound = model_bound(pods, fleet.nodes, 30, random.Random(1))
    gpu_pods = [p for p in pods if p.num_gpu]
    changed = [b for p, b in zip(pods, bound) if b.models != p.models]
    assert len(changed) == round(0.3 * len(gpu_pods))
    assert all(b.num_gpu for b in changed)
    assert {len(b.models) for b in changed} == {1, 2, 3}
    for b in changed:
        assert len(set(b.models)) == len(b.models)
        for model in b.models:  # a node of that model could hold the pod alone
            assert any(n.model == model and n.gpus >= b.num_gpu and n.cpu_milli >= b.cpu_milli
                       for n in fleet.nodes)
    assert [(p.name, p.cpu_milli, p.num_gpu, p.gpu_milli) for p in pods] == \
           [(b.name, b.cpu_milli, b.num_gpu, b.gpu_milli) for b in bound]


def test_variants_are_a_function_of_the_seed(fleet):
    pods = list(fleet.pods) * 5
    pods = [replace(p, name=f"{p.name}-{i}", models=()) for i, p in enumerate(pods)]
    assert variants(pods, fleet.nodes, 3) == variants(pods, fleet.nodes, 3)
    assert variants(pods, fleet.nodes, 3)["model-bound-50"] != variants(pods, fleet.nodes, 4)["model-bound-50"]
    assert variant_names()[:1] == ["default"] and "model-bound-30" in variant_names()


def test_paired_difference_is_the_policy_minus_the_baseline_on_each_seed(fleet):
    traces = variant_traces(fleet, ["default", "model-bound-50"], 7)
    result = compare(traces, "gpuledger", "bestfit", [1, 2, 3])
    out = result.to_json()
    for variant in ("default", "model-bound-50"):
        per_seed = out["variants"][variant]["per_seed"]
        diffs = [per_seed[str(s)]["gpuledger"]["100"] - per_seed[str(s)]["bestfit"]["100"] for s in (1, 2, 3)]
        paired = out["variants"][variant]["paired"]["unalloc_100"]
        assert paired["mean"] == pytest.approx(sum(diffs) / 3)
        assert paired["wins"] == sum(d < 0 for d in diffs)
    assert traces["model-bound-50"].pods != fleet.pods and traces["default"] is fleet


def test_cli_compares_on_variants_and_names_bad_options(small_trace):
    nodes, pods = small_trace
    base = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1-2", "--workers", "1"]
    out = CliRunner().invoke(app, [*base, "--against", "fgd", "--variant", "default",
                                   "--variant", "model-bound-10", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)  # no NaN: levels a small trace never reaches are null
    assert set(result["variants"]) == {"default", "model-bound-10"}
    assert result["policy"] == "gpuledger" and result["baseline"] == "fgd"
    text = CliRunner().invoke(app, [*base, "--against", "fgd"])
    assert text.exit_code == 0 and "| default |" in text.output and "paired" in text.output
    for args, message in [(["--variant", "default"], "--variant: applies to --against"),
                          (["--against", "fgd", "--variant", "nope"], "--variant: unknown nope"),
                          (["--against", "fgd", "--policy", "a", "--policy", "b"], "--policy: --against compares one"),
                          (["--against", "nope"], "--policy: unknown nope")]:
        bad = CliRunner().invoke(app, [*base, *args])
        assert bad.exit_code == 2 and message in bad.output, bad.output


def test_model_scarce_binds_the_share_of_gpu_pods_to_the_rarest_models_that_can_hold_them(fleet):
    from simulator.variants import SCARCE_SHARE, model_scarce, scarce_models

    assert scarce_models({"G2": 80, "T4": 15, "V100M16": 3, "V100M32": 4}) == ("V100M16", "V100M32", "T4")
    assert scarce_models({"G2": 80}) == ("G2",)
    pods = [replace(p, name=f"{p.name}-{i}", models=()) for i, p in enumerate(list(fleet.pods) * 10)]
    bound = model_scarce(pods, fleet.nodes, 15, random.Random(1))
    changed = [b for p, b in zip(pods, bound) if b.models != p.models]
    assert len(changed) == round(0.15 * len([p for p in pods if p.num_gpu]))
    for b in changed:
        fits = {n.model: 0 for n in fleet.nodes}
        for n in fleet.nodes:
            if n.gpus >= b.num_gpu and n.cpu_milli >= b.cpu_milli and n.memory_mib >= b.memory_mib:
                fits[n.model] += n.gpus
        held = sum(fits[m] for m in b.models)
        assert held > 0 and all(fits[m] for m in b.models)  # every bound pod fits an empty node
        # the rarest first: no model left out is rarer than one chosen
        assert max(fits[m] for m in b.models) <= min((g for m, g in fits.items() if g and m not in b.models),
                                                      default=10**9)
        assert held - max(fits[m] for m in b.models) < SCARCE_SHARE * sum(fits.values())  # no more than needed
    assert "model-scarce-15" in variants(pods, fleet.nodes, 3)
