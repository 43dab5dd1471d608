"""The one-pass harness releases a pod that no node could hold by CPU, memory and card room alone
without asking `decide` (simulator/onepass.py `fits_nowhere`): the family's CPU-heavy members fail
half their pods, and a failing decision walks every node. The figures must not move."""

from __future__ import annotations

import pytest

from simulator import onepass
from simulator.cluster import trace_shapes
from simulator.protocol import Workload
from simulator.trace import NodeRow, PodRow

NODES = (NodeRow("n0", 16000, 65536, 4, "G2"), NodeRow("n1", 8000, 32768, 2, "T4"))


def _pods() -> tuple[PodRow, ...]:
    kinds = [(1, 600, 2000, ()), (0, 0, 6000, ()), (2, 1000, 4000, ()), (1, 500, 1000, ("T4",)),
             (1, 1000, 3000, ()), (0, 0, 5000, ()), (4, 1000, 1000, ()), (1, 300, 1000, ()),
             (1, 900, 2000, ("T4",)), (0, 0, 9000, ()), (1, 400, 500, ()), (2, 1000, 500, ())]
    return tuple(PodRow(f"p{i:02d}", cpu, 1024, k, u, models) for i, (k, u, cpu, models) in enumerate(kinds * 3))


@pytest.mark.parametrize("policy", ["gpuledger", "fgd", "bestfit"])
def test_pods_that_fit_nowhere_skip_decide_and_the_figures_stay(policy, monkeypatch):
    work = Workload(seed=1, pods=_pods(), nodes=NODES, capacity=6000)
    shapes = trace_shapes(work.pods)
    fast = onepass.run_pass(work, policy, shapes)
    monkeypatch.setattr(onepass, "fits_nowhere", lambda state, pod: False)
    slow = onepass.run_pass(work, policy, shapes)
    assert (fast.arrived, fast.allocated, fast.fragmentation, fast.failed) == \
           (slow.arrived, slow.allocated, slow.fragmentation, slow.failed)
    assert sum(slow.failed.values()) > 10 and slow.decisions == len(work.pods)
    assert fast.decisions < slow.decisions  # the pods that fit nowhere were not decided
