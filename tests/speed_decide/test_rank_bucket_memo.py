"""The rank-ordered buckets a need reads (`ledger.state._rank_buckets`) are kept in the caller's
memo between choices, valid while `State.ranked` has the same buckets: the groups a need gets with
the memo kept across passes must be exactly those it gets without one, and those the room index
holds, as the fleet changes (allocations and releases, nodes leaving and coming back, devices
faulting, a node of a model never seen registering: new kinds and rooms, so new buckets). Pure."""

from __future__ import annotations

import random

import bench.decide as bench_decide
from schemas import events as ev
from schemas.types import DeviceInfo
from tests.speed.test_core_rank_buckets import QUERIES, _shake

MORE = QUERIES + [(frozenset({"B200"}), "", "", 1, 1000), (None, "", "", 1, 350)]


def _groups(state, query, memo):
    return [g.rank0 for g in state.groups_by_first_rank(*query, memo=memo)]


def test_kept_buckets_give_the_groups_a_fresh_look_up_gives():
    rng = random.Random(11)
    bench = bench_decide.Bench(60, "gpuledger", seed=4)
    memo: dict = {}
    grew, last = 0, len(bench.state.ranked)
    for step in range(150):
        for _ in range(rng.randint(0, 6)):
            bench.arrive()
        bench.step()
        if step % 3 == 0:
            bench.release_some(target_pending=rng.randint(0, 20))
        if rng.random() < 0.3:
            _shake(bench, rng)
        if step in (40, 90):  # a model never seen: its kind's buckets are made now
            devices = [DeviceInfo(uuid=f"GPU-b{step}-{i}", index=i, model="B200", memory_mib=184320)
                       for i in range(8)]
            bench.fold(ev.NodeRegistered(node=f"b200-{step}", devices=devices, cpu_milli=128_000,
                                         memory_mib=1 << 20, at=bench.now))
        grew += len(bench.state.ranked) > last  # buckets made since the memo's last look-ups
        last = len(bench.state.ranked)
        for query in MORE:
            fresh = sorted(bench.state.groups_with_room(*query), key=lambda g: g.rank0)
            assert _groups(bench.state, query, memo) == [g.rank0 for g in fresh], (step, query)
            assert _groups(bench.state, query, None) == [g.rank0 for g in fresh], (step, query)
    assert grew >= 3 and len(bench.state.holding) > 20
    assert _groups(bench.state, MORE[-2], memo)  # the B200 nodes are found through the memo
