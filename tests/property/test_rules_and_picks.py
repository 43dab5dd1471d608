"""The rules marked `decided_by_pick` are what `default_pick` decides: placement skips checking
them because every built-in policy picks with it, so the two must agree on every view and need."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.state import FREE, NodeStatic, NodeView, UnitView
from services.allocator.core.demand import Need
from services.allocator.core.picks import default_pick
from services.allocator.core.rules import RULES

MODELS = ("H100", "A100")

units = st.builds(
    lambda milli, holders, healthy, model, pool, mig, island: UnitView(
        FREE if holders == 0 else milli, holders, healthy, model, island, mig, pool, 0, 81920, 0, -1),
    st.sampled_from([0, 100, 250, 500, 750, 900]), st.integers(0, 2), st.booleans(),
    st.sampled_from(MODELS), st.sampled_from(["", "p1"]), st.sampled_from(["", "3g.40gb"]),
    st.integers(0, 1))


@st.composite
def views(draw) -> NodeView:
    node_units = tuple(draw(st.lists(units, min_size=0, max_size=6)))
    models = tuple(sorted({u.model for u in node_units}))
    return NodeView(NodeStatic(models, (), "12.4", 64000, 1 << 20), draw(st.integers(0, 8000)),
                    draw(st.integers(0, 8192)), node_units)


needs = st.builds(
    lambda count, milli, mig, cpu, mem, pool, models: Need(
        count, FREE if mig else milli, mig, cpu, mem, pool, models, "need"),
    st.integers(0, 3), st.sampled_from([250, 500, FREE]), st.sampled_from(["", "3g.40gb"]),
    st.integers(0, 8000), st.integers(0, 8192), st.sampled_from(["", "p1"]),
    st.sampled_from([None, frozenset({"H100"}), frozenset(MODELS)]))


@settings(max_examples=400, deadline=None)
@given(views(), needs)
def test_default_pick_refuses_exactly_what_the_pick_rules_refuse(view, need):
    picked_rules_pass = all(rule.check(view, need, None) for rule in RULES if rule.decided_by_pick)
    assert (default_pick(view, need) is not None) == picked_rules_pass
