"""The gang bound never overstates: whenever it calls a gang never-satisfiable, the allocator
cannot place that gang on the same fleet emptied; and when the allocator does place it, the bound
had said nothing."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from schemas import events as ev
from services.allocator.core.decide import DecideContext
from services.allocator.core.decision_pass import Pass
from services.allocator.core.gang_never import gang_never_reason
from services.allocator.core.place import member_needs
from tests.fleet import Ledger, claim, h100_node

members_st = st.lists(st.tuples(st.integers(0, 8), st.sampled_from([0, 16_000, 40_000, 70_000])),
                      min_size=2, max_size=6)


@settings(max_examples=150, deadline=None)
@given(nodes=st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=3), members=members_st)
def test_a_gang_called_never_is_never_placed_on_the_empty_fleet(nodes, members):
    led = Ledger()
    led.append(*[h100_node(f"h{i}", gpus=n, islands=1) for i, n in enumerate(nodes)])
    size = len(members)
    led.append(*[claim(f"g{i}", gpus=gpus, cpu_milli=cpu or 1000, gang_id="job", gang_size=size)
                 for i, (gpus, cpu) in enumerate(members)])
    run = Pass(ctx=DecideContext(now=1.0))
    claims = [led.state.claims[f"g{i}"] for i in range(size)]
    reason = gang_never_reason(led.state, "job", [member_needs(led.state, run, c) for c in claims])
    placed = sum(isinstance(d, ev.ClaimAllocated) for d in led.decide(1.0))
    if reason is not None:
        assert placed == 0, reason.message
    if placed:
        assert reason is None
