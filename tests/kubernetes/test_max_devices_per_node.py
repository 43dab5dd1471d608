"""Seed 004's maxDevicesPerNode: a pool holds at most that many devices on one node; the rest
stay free for other pools. (Issue 15: with 1, a pool held 4 cards on one node.)"""

from __future__ import annotations

import pytest

from schemas import events as ev
from schemas.types import DeviceSelector, PoolSpec
from tests.fleet import Ledger, claim
from tests.pool_controller.fixtures import node_registered, state_of


def members(state, pool):
    return sorted((u.node, u.index) for u in state.units.values() if u.pool == pool)


@pytest.mark.parametrize("limit, expected", [
    (0, [("n1", 0), ("n1", 1), ("n1", 2), ("n1", 3), ("n2", 0), ("n2", 1), ("n2", 2), ("n2", 3)]),
    (1, [("n1", 0), ("n2", 0)]),
    (3, [("n1", 0), ("n1", 1), ("n1", 2), ("n2", 0), ("n2", 1), ("n2", 2)]),
], ids=["no-limit", "one", "three"])
def test_a_pool_holds_at_most_max_devices_per_node_on_each_node(limit, expected):
    state = state_of(node_registered("n1", 4), node_registered("n2", 4),
                     ev.PoolCreated(pool=PoolSpec(name="p", max_devices_per_node=limit)))
    assert members(state, "p") == expected


def test_devices_a_full_pool_leaves_fall_to_the_next_pool_that_selects_them():
    state = state_of(node_registered("n1", 4),
                     ev.PoolCreated(pool=PoolSpec(name="first", max_devices_per_node=1)),
                     ev.PoolCreated(pool=PoolSpec(name="second", include=DeviceSelector(products=["A100"]))))
    assert members(state, "first") == [("n1", 0)]
    assert members(state, "second") == [("n1", 1), ("n1", 2), ("n1", 3)]


def test_the_limit_holds_whichever_order_nodes_and_pools_arrive_in():
    pool = ev.PoolCreated(pool=PoolSpec(name="p", max_devices_per_node=2))
    before = state_of(pool, node_registered("n1", 4))
    after = state_of(node_registered("n1", 4), pool)
    assert members(before, "p") == members(after, "p") == [("n1", 0), ("n1", 1)]


def test_a_claim_in_a_pool_of_one_device_per_node_cannot_get_two_from_one_node():
    ledger = Ledger()
    ledger.append(node_registered("n1", 4), ev.PoolCreated(pool=PoolSpec(name="p", max_devices_per_node=1)),
                  claim("two", gpus=2, pool="p"), claim("one", gpus=1, pool="p"))
    decisions = ledger.decide(1.0)
    allocated = {d.claim_id: d for d in decisions if isinstance(d, ev.ClaimAllocated)}
    assert list(allocated) == ["one"] and [g.index for g in allocated["one"].grants] == [0]
