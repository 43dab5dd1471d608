"""A decision pass's allocations reindex their node reusing the unit entries that did not change
(`ledger.state.reindex_used`), its rollback puts each node it touched back under the view it had
before (`restore_view`) instead of building it again, and a group that empties is kept aside
(`State.spare_groups`) and taken back when its view returns. Either way the placement index must be exactly the one a rebuild from the units gives:
checked after every pass of a busy run with gangs that fail half-placed (a rollback to a mark),
nodes leaving and coming back and devices faulting, with the batch rolled back and folded (the
default bench) and kept applied (`--kept`, as the allocator runs). Pure, no server."""

from __future__ import annotations

import random

import pytest

import bench.decide as bench_decide
from ledger.holdings import Journal
from ledger import state as ledger_state
from ledger.state import NodeView, free_units, share_room, unit_view
from tests.speed.test_core_rank_buckets import _check_buckets, _shake


def _check_index(state) -> None:
    """Every node under the view its units give, every group the nodes of one view, each filed
    under the room that view has (what `flush_index` would build)."""
    expected: dict[NodeView, list[int]] = {}
    for node in state.nodes.values():
        if not node.schedulable:
            assert node.view is None, node.name
            continue
        view = NodeView(node.static, node.cpu_free, node.mem_free, tuple(unit_view(u) for u in node.units))
        assert node.view == view, node.name
        expected.setdefault(view, []).append(node.rank)
    assert {view: sorted(ranks) for view, ranks in expected.items()} == \
        {view: list(group.ranks) for view, group in state.groups.items()}
    filed_free, filed_share = set(), set()
    for view, group in state.groups.items():
        assert group.view == view
        assert group.free == free_units(view) and group.share == share_room(view)
        assert group.names == {rank: state.nodes[name].name for rank, name in group.names.items()}
        filed_free.update((key, room, id(group)) for key, room in group.free.items())
        filed_share.update((key, room, id(group)) for key, room in group.share.items())
        for model in view.static.models or ("",):
            assert group in state.groups_by_model[model]
    for index, filed in ((state.groups_by_free, filed_free), (state.groups_by_share, filed_share)):
        assert {(key, room, id(g)) for key, rooms in index.items() for room, gs in rooms.items() for g in gs} == filed
    assert {id(g) for gs in state.groups_by_model.values() for g in gs} == {id(g) for g in state.groups.values()}
    for view, group in state.spare_groups.items():  # emptied groups kept aside, none live
        assert not group.ranks and group.filed == -1 and group.view == view and view not in state.groups
    _check_buckets(state)


@pytest.mark.parametrize("kept", [False, True])
def test_the_index_after_each_pass_is_the_rebuilt_one(monkeypatch, kept):
    marks = []  # the marks of the rollbacks that undid tentative changes
    rollback = Journal.rollback

    def counted(self, state, mark=0, keep_shared=False):
        if len(self._undo) > mark:
            marks.append(mark)
        rollback(self, state, mark, keep_shared)

    monkeypatch.setattr(Journal, "rollback", counted)
    made = joined = 0
    join, group_init = ledger_state._join, ledger_state.Group.__init__

    def counted_join(*args):
        nonlocal joined
        joined += 1
        join(*args)

    def counted_group(self, view):
        nonlocal made
        made += 1
        group_init(self, view)

    monkeypatch.setattr(ledger_state, "_join", counted_join)
    monkeypatch.setattr(ledger_state.Group, "__init__", counted_group)
    rng = random.Random(11)
    bench = bench_decide.Bench(40, "gpuledger", seed=4, kept=kept)
    for step in range(150):
        for _ in range(rng.randint(0, 5)):
            bench.arrive()
        bench.step()
        if step % 3 == 0:
            bench.release_some(target_pending=rng.randint(0, 25))
        if rng.random() < 0.25:
            _shake(bench, rng)
        _check_index(bench.state)
    assert len(bench.state.holding) > 20  # the fleet was busy, not empty
    # a rolled-back allocation puts its node back in the group it left, taken back if emptied
    assert kept or made < 0.5 * joined
    assert any(marks)  # gangs placed in part, then taken back to a mark inside the pass
    assert kept or marks.count(0) > 50  # whole passes rolled back
