"""The offline packing floor: best-fit decreasing packs the shares arrived by 100 % as it should."""

from __future__ import annotations

from collections import Counter

import pytest

from simulator.bound import best_fit_decreasing, bound, lp_cards, shares_by_100
from simulator.protocol import workload
from simulator.trace import read_trace


@pytest.mark.parametrize("shares, rooms", [
    (Counter({600: 2, 400: 2}), [0, 0]),
    (Counter({810: 3, 160: 1, 50: 1}), [30, 140, 190]),  # 160 to the fullest room; 50 cannot use 30
    (Counter({470: 3}), [60, 530]),
])
def test_best_fit_decreasing_fills_the_fullest_card_that_fits(shares, rooms):
    assert sorted(best_fit_decreasing(shares)) == rooms


def test_the_shares_counted_are_those_arrived_before_100_percent(small_trace):
    trace = read_trace(*small_trace)
    work, arrived, expected = workload(trace, 3), 0, Counter()
    for pod in work.pods:
        if arrived >= trace.capacity:
            break
        if pod.num_gpu == 1 and pod.gpu_milli < 1000:
            expected[pod.gpu_milli] += 1
        arrived += pod.gpu_demand
    assert shares_by_100(trace, 3) == expected and expected
    row = bound(trace, 3)
    assert row["bfd_waste_pct"] == pytest.approx(100 * sum(best_fit_decreasing(expected)) / trace.capacity)


def test_the_lp_bound_is_never_above_a_packing_it_knows():
    pytest.importorskip("scipy")
    shares = Counter({810: 5, 470: 7, 320: 4, 160: 2})
    rooms = best_fit_decreasing(shares)
    assert lp_cards(shares) <= len(rooms) + 1e-9
