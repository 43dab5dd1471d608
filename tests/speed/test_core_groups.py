"""A group's first node (`Group.rank0`, `Group.name0`), which the rank-ordered scan sorts by, stays
the lowest rank of its nodes as nodes join and leave in any order (pure, no server)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.state import Group

OPS = st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=30)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_the_first_node_follows_joins_and_leaves(ops):
    group, members = Group(view=None), {}
    for join, rank in ops:
        if join and rank not in members:
            members[rank] = f"node-{rank}"
            group.add(rank, members[rank])
        elif not join:
            members.pop(rank, None)
            group.remove(rank)
        if members:
            first = min(members)
            assert (group.rank0, group.name0) == (first, members[first]) == group.first()
