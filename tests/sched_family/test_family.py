"""The openb family (simulator/family.py): each member varies one proportion of the pod list as
its published name says, keeps the rest, and is a pure function of the list and the seed."""

from __future__ import annotations

import random

import pytest

from simulator.compare import variant_names
from simulator.family import cpu_variant, gpushare_variant, is_share, multigpu_variant, resize
from simulator.trace import NodeRow, PodRow
from simulator.variants import variants

PUBLISHED = ["cpu050", "cpu100", "cpu200", "cpu250", "gpushare020", "gpushare040", "gpushare060",
             "gpushare080", "gpushare100", "multigpu020", "multigpu030", "multigpu040", "multigpu050",
             "gpuspec010", "gpuspec020", "gpuspec025", "gpuspec033"]
NODES = (NodeRow("n0", 96000, 393216, 8, "G2"), NodeRow("n1", 64000, 262144, 4, "T4"),
         NodeRow("n2", 96000, 393216, 8, "V100M32"))


def _pods() -> list[PodRow]:
    """300 pods: 60 CPU-only, 120 shares, 100 of one card, 20 of 2, 4 or 8 cards."""
    kinds = ([(0, 0, 2000)] * 60 + [(1, 300 + 100 * (i % 6), 4000) for i in range(120)]
             + [(1, 1000, 8000)] * 100 + [(2 ** (1 + i % 3), 1000, 16000) for i in range(20)])
    return [PodRow(f"p{i:03d}", cpu, 1024, k, u, ()) for i, (k, u, cpu) in enumerate(kinds)]


def _gpu(pods):
    return [p for p in pods if p.num_gpu]


def test_every_published_suffix_is_a_variant_and_draws_the_same_for_a_seed():
    assert set(PUBLISHED) <= set(variant_names())
    made, again = variants(_pods(), NODES, 3), variants(_pods(), NODES, 3)
    assert all(made[n] == again[n] for n in PUBLISHED)
    assert made["gpushare060"] != variants(_pods(), NODES, 4)["gpushare060"]
    for name in PUBLISHED:
        names = [p.name for p in made[name]]
        assert len(names) == len(set(names)), name  # copies get names of their own


@pytest.mark.parametrize("percent", [50, 100, 250])
def test_cpu_nnn_makes_the_non_gpu_pods_ask_nnn_percent_of_the_gpu_pods_cpu(percent):
    pods = cpu_variant(_pods(), percent, random.Random(1))
    gpu_cpu = sum(p.cpu_milli for p in _gpu(pods))
    cpu_only = sum(p.cpu_milli for p in pods if not p.num_gpu)
    assert cpu_only == pytest.approx(percent / 100 * gpu_cpu, rel=0.01)
    assert sorted(_gpu(pods), key=str) == sorted(_gpu(_pods()), key=str)  # the GPU pods as they were


@pytest.mark.parametrize("percent", [20, 60, 100])
def test_gpushare_nnn_makes_shares_nnn_percent_of_the_gpu_pods_by_count(percent):
    pods = gpushare_variant(_pods(), percent, random.Random(1))
    gpu = _gpu(pods)
    assert len(gpu) == len(_gpu(_pods())) and sum(map(is_share, gpu)) == round(percent / 100 * len(gpu))
    assert [p for p in pods if not p.num_gpu] != [] and len(pods) - len(gpu) == 60


@pytest.mark.parametrize("percent", [20, 50])
def test_multigpu_nnn_makes_multi_gpu_pods_ask_nnn_percent_of_the_gpus(percent):
    pods = multigpu_variant(_pods(), percent, random.Random(1))
    total = sum(p.gpu_demand for p in _gpu(pods))
    multi = sum(p.gpu_demand for p in pods if p.num_gpu > 1)
    assert multi / total == pytest.approx(percent / 100, abs=0.02)
    assert total == pytest.approx(sum(p.gpu_demand for p in _pods()), rel=0.02)


def test_gpuspec_nnn_binds_nnn_percent_of_the_gpu_pods_to_models_a_node_has():
    made = variants(_pods(), NODES, 3)
    for percent in (10, 20, 25, 33):
        gpu = _gpu(made[f"gpuspec{percent:03d}"])
        bound = [p for p in gpu if p.models]
        assert len(bound) == round(percent / 100 * len(gpu))
        assert all(set(p.models) <= {"G2", "T4", "V100M32"} for p in bound)


def test_resize_copies_every_pod_before_any_twice_and_samples_when_smaller():
    pods = _pods()[:10]
    grown = resize(pods, 25, random.Random(2))
    base = {p.name.split("-v")[0] for p in grown}
    assert len(grown) == 25 and base == {p.name for p in pods}
    assert all(2 <= sum(q.name.split("-v")[0] == p.name for q in grown) <= 3 for p in pods)
    assert len(resize(pods, 4, random.Random(2))) == 4 and resize([], 5, random.Random(2)) == []
