"""`bench decide --kept` times each pass as the allocator runs it (`decide_kept`, the batch then kept
applied instead of rolled back and folded again): the state it keeps must be the fold's, so it
decides exactly what the default bench decides, pass after pass (pure, no server)."""

from __future__ import annotations

import pytest

import bench.decide as bench_decide


@pytest.mark.parametrize("policy", ["gpuledger", "binpack"])
def test_kept_batches_decide_as_folded_ones(policy):
    folded = bench_decide.run(40, steps=80, policy=policy, fill=0.8, digest=True)
    kept = bench_decide.run(40, steps=80, policy=policy, fill=0.8, digest=True, kept=True)
    assert kept["kept"] and not folded["kept"]
    assert kept["decisions"] == folded["decisions"] > 50
    assert kept["decisions_sha256"] == folded["decisions_sha256"]
    assert kept["pending_at_end"] == folded["pending_at_end"]


def test_the_random_policy_is_benched_with_a_seeded_generator_of_its_own():
    # it crashed for want of a generator (DecideContext.rng); seeded, two runs decide alike
    first = bench_decide.run(40, steps=40, policy="random", fill=0.8, digest=True)
    again = bench_decide.run(40, steps=40, policy="random", fill=0.8, digest=True)
    assert first["decisions"] > 20 and first["decisions_sha256"] == again["decisions_sha256"]
