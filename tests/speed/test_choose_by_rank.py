"""The rank-ordered scan (`placement._choose_by_rank`, the hot loop of a pass at 10,000 nodes) gives
the answer of scoring every candidate: the highest score, ties to the lowest rank, None when no
candidate fits; also with nodes held for a starving claim (`excluded`) and with a kept memo.

Checked on every choice the decision benchmark's passes make (its fleet and claim mix: whole cards,
shares, MIG, gangs, host memory and CPU), for the policies that take that path."""

from __future__ import annotations

import dataclasses

import pytest

import bench.decide as bench_decide
from services.allocator.core import placement


def _full_scan(state, need, policy, ctx):
    """Every candidate scored, nothing memoised: the answer the scan must equal."""
    fresh = dataclasses.replace(ctx, memo=None)
    best = None
    for c in placement._candidates(state, need, policy, fresh):
        if best is None or c.score > best.score or (c.score == best.score and c.rank < best.rank):
            best = c
    return best


@pytest.mark.parametrize("policy", ["gpuledger", "fgd"])
def test_rank_ordered_scan_equals_full_scan(monkeypatch, policy):
    checked = {"choices": 0, "none": 0, "excluded": 0}
    scan = placement._choose_by_rank

    def checking(state, need, pol, ctx, ceiling):
        found = scan(state, need, pol, ctx, ceiling)
        assert found == _full_scan(state, need, pol, ctx)
        checked["choices"] += 1
        checked["none"] += found is None
        if found is not None:  # hold the chosen node and one more, as for a starving claim
            held = dataclasses.replace(ctx, excluded=frozenset({found.node, "node-00001"}))
            assert scan(state, need, pol, held, ceiling) == _full_scan(state, need, pol, held)
            checked["excluded"] += 1
        return found

    monkeypatch.setattr(placement, "_choose_by_rank", checking)
    bench_decide.run(40, steps=60, policy=policy, fill=0.8)
    assert checked["choices"] > 100 and checked["excluded"] > 50
