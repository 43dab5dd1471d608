"""The published numbers on the real trace (slow: set GPULEDGER_SLOW_SIM=1 to run)."""

from __future__ import annotations

import os

import pytest

from simulator import runner

pytestmark = pytest.mark.skipif(not os.environ.get("GPULEDGER_SLOW_SIM"),
                                reason="set GPULEDGER_SLOW_SIM=1 (minutes on the openb trace)")


def test_bestfit_lands_within_0_3_of_the_published_7_14():
    if not runner.DEFAULT_PODS.exists():
        pytest.skip("../shared/data/openb not beside the checkout")
    [summary] = runner.run_all(runner.DEFAULT_NODES, runner.DEFAULT_PODS, ["bestfit"],
                               list(range(42, 52)), workers=2)
    assert abs(summary.unalloc[100]["mean"] - 7.14) <= 0.3
