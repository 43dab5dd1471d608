"""A node view's hash is its tuple's, computed once per view object (`ledger.state.NodeView`):
the placement index looks a view up by value several times each time a node moves (a MIG node's
view is 40 units of 11 fields, all hashed on every look-up before). Equal views still hash alike,
and a copy or pickle starts without the kept hash. Pure."""

from __future__ import annotations

import copy
import pickle

from ledger.state import NodeStatic, NodeView, UnitView

STATIC = NodeStatic(("H100",), (("zone", "z1"),), "12.4", 128_000, 1 << 20)
UNITS = tuple(UnitView(1000, 0, True, "H100", i // 4, "", "", 0, 81559, i, 0) for i in range(8))


class Counted:
    """Hashes as the number 7, counting how often it is asked."""

    calls = 0

    def __hash__(self) -> int:
        Counted.calls += 1
        return 7

    def __eq__(self, other) -> bool:
        return isinstance(other, Counted)


def test_a_view_hashes_its_entries_once():
    view = NodeView(STATIC, 1000, 2000, (*UNITS, Counted()))
    Counted.calls = 0
    assert hash(view) == hash(view) == hash(tuple(view))  # (the tuple hashes them again: 2 calls)
    assert Counted.calls == 2
    index = {view: "group"}
    assert index[view] == "group" and index.get(NodeView(*view)) == "group"  # an equal view, another object
    assert Counted.calls == 3  # the other object hashed once


def test_equal_views_hash_alike_and_copies_carry_no_kept_hash():
    view = NodeView(STATIC, 1000, 2000, UNITS)
    hash(view)
    for other in (NodeView(STATIC, 1000, 2000, UNITS), copy.deepcopy(view), pickle.loads(pickle.dumps(view)),
                  view._replace(cpu_free=1000)):
        assert type(other) is NodeView and other == view and hash(other) == hash(view)
    assert "_hash" not in vars(pickle.loads(pickle.dumps(view)))
    assert hash(view._replace(cpu_free=999)) != hash(view)
