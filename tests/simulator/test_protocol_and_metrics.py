"""The published protocol's steps and the metrics, on cases checked by hand."""

from __future__ import annotations

import random

import pytest

from simulator.metrics import level_of, mean_sd, unallocated
from simulator.protocol import cut, parse_seeds, top_up, workload
from simulator.trace import PodRow, read_trace


def pod(name: str, demand: int) -> PodRow:
    return PodRow(name, 1000, 0, 1, demand, ())


def test_top_up_stops_before_the_draw_that_would_pass_the_target():
    pods = [pod("a", 300), pod("b", 500)]
    filled = top_up(list(pods), 2_000, random.Random(1))
    total = sum(p.gpu_demand for p in filled)
    assert total <= 2_000 and filled[:2] == pods
    assert all(p.name.split("-copy")[0] in ("a", "b") for p in filled[2:])
    assert total + 500 > 2_000 or total + 300 > 2_000  # stopped only when a draw no longer fit


def test_cut_removes_pods_until_the_total_is_within_the_target():
    pods = [pod(f"p{i}", 400) for i in range(10)]
    kept = cut(list(pods), 2_100, random.Random(3))
    assert sum(p.gpu_demand for p in kept) == 2_000 and len(kept) == 5


def test_a_workload_fills_to_130_percent_and_is_the_same_for_the_same_seed(small_trace):
    trace = read_trace(*small_trace)
    one, two, other = workload(trace, 7), workload(trace, 7), workload(trace, 8)
    assert one == two and one != other
    largest = max(p.gpu_demand for p in trace.pods)
    assert 1.3 * trace.capacity - largest < sum(p.gpu_demand for p in one.pods) <= 1.3 * trace.capacity
    assert sorted(n.name for n in one.nodes) == sorted(n.name for n in trace.nodes)


def test_levels_round_halves_up_and_average_the_events_at_each_level():
    assert level_of(995, 1000) == 100 and level_of(994, 1000) == 99 and level_of(1005, 1000) == 101
    # capacity 1000: arrived 985 (level 99 -> wait, 98.5 -> 99), 1000 (100), 1004 (100)
    u = unallocated([985, 1000, 1004], [985, 960, 940], 1000)
    assert u[99] == pytest.approx(1.5)
    assert u[100] == pytest.approx(100 - (96.0 + 94.0) / 2)


def test_mean_and_sample_sd():
    assert mean_sd([4.0, 6.0]) == {"mean": 5.0, "sd": pytest.approx(2 ** 0.5), "n": 2}
    assert mean_sd([3.0])["sd"] == 0.0


def test_seed_ranges():
    assert parse_seeds("42-44,50") == [42, 43, 44, 50]
    with pytest.raises(ValueError, match="--seeds"):
        parse_seeds("44-42")
