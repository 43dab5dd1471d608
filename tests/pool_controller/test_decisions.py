"""Pool commands as pure decisions over the folded log."""

from __future__ import annotations

from schemas import events as ev
from schemas.commands import CreatePool, DeletePool, Reply, UpdatePool
from ledger.evolve import evolve
from services.pool_controller.decisions import Append, decide_create, decide_delete, decide_update
from services.pool_controller.projection import allocations_in_pool, pool_nodes, pool_status
from services.pool_controller.validation import ClusterFacts

from tests.pool_controller.fixtures import allocation, node_registered, pool, state_of

FACTS = ClusterFacts()


def test_a_valid_new_pool_is_created_on_its_own_subject():
    outcome = decide_create(state_of(), CreatePool(pool=pool()), FACTS, now=5.0)
    assert isinstance(outcome, Append)
    assert outcome.subject == "gpu.evt.pool.a100"
    assert outcome.event == ev.PoolCreated(pool=pool(), at=5.0)


def test_an_invalid_pool_is_refused_naming_the_field():
    outcome = decide_create(state_of(), CreatePool(pool=pool(backend="dra")), FACTS, now=0)
    assert isinstance(outcome, Reply) and not outcome.ok
    assert outcome.error.field == "pool.backend"


def test_creating_an_identical_pool_again_is_a_no_op_and_a_different_one_a_conflict():
    state = state_of(ev.PoolCreated(pool=pool()))
    same = decide_create(state, CreatePool(pool=pool()), FACTS, now=0)
    assert same.ok and same.data == {"pool": "a100", "created": False}
    other = decide_create(state, CreatePool(pool=pool(slices_per_unit=2)), FACTS, now=0)
    assert other.error.code == "conflict"


def test_an_update_that_changes_an_immutable_field_is_refused_naming_it():
    state = state_of(ev.PoolCreated(pool=pool()))
    outcome = decide_update(state, UpdatePool(pool=pool(slices_per_unit=2, access_groups=["x"])), now=0)
    assert outcome.error.code == "invalid" and outcome.error.field == "pool.slices_per_unit"
    assert "immutable" in outcome.error.message


def test_an_access_update_appends_every_access_list_and_the_fold_applies_it():
    state = state_of(ev.PoolCreated(pool=pool(access_namespaces=["a"])))
    wanted = pool(access_namespaces=["b"], access_service_accounts=["b:sa"], access_groups=["ml"])
    outcome = decide_update(state, UpdatePool(pool=wanted), now=1)
    assert isinstance(outcome, Append)
    evolve(state, outcome.event, 2)
    assert state.pools["a100"] == wanted
    assert decide_update(state, UpdatePool(pool=wanted), now=2).data["changed"] is False


def test_an_access_event_from_before_service_accounts_keeps_them():
    state = state_of(ev.PoolCreated(pool=pool(access_service_accounts=["a:sa"])),
                     ev.PoolAccessChanged(pool="a100", namespaces=["a"]))
    assert state.pools["a100"].access_service_accounts == ["a:sa"]
    assert state.pools["a100"].access_namespaces == ["a"]


def test_updating_or_deleting_an_unknown_pool_is_not_found():
    assert decide_update(state_of(), UpdatePool(pool=pool()), now=0).error.code == "not-found"
    assert decide_delete(state_of(), DeletePool(name="nope"), now=0).error.code == "not-found"


def test_a_pool_with_allocations_cannot_be_deleted_until_they_are_released():
    events = [node_registered("n1"), ev.PoolCreated(pool=pool()), *allocation("job-1", "n1", 0)]
    state = state_of(*events)
    assert allocations_in_pool(state, "a100") == ["job-1"]
    refused = decide_delete(state, DeletePool(name="a100"), now=0)
    assert refused.error.code == "conflict" and "job-1" in refused.error.message
    evolve(state, ev.ClaimReleased(claim_id="job-1"), len(events) + 1)
    assert isinstance(decide_delete(state, DeletePool(name="a100"), now=0), Append)


def test_an_evicted_or_expired_allocation_no_longer_blocks_deletion():
    for ending in (ev.ClaimEvicted(claim_id="job-1", rule="priority"),
                   ev.AllocationExpired(claim_id="job-1", last_renewed=0.0)):
        state = state_of(node_registered("n1"), ev.PoolCreated(pool=pool()), *allocation("job-1", "n1", 0),
                         ev.DecisionBatch(decisions=[ending]))
        assert allocations_in_pool(state, "a100") == []


def test_the_pool_reports_the_devices_its_selectors_pick():
    state = state_of(node_registered("n1", model="A100"), node_registered("n2", model="L4"),
                     ev.PoolCreated(pool=pool(node_selector={"gpu": "yes"})),
                     node_registered("n3", model="A100", labels={"gpu": "yes"}),
                     ev.DeviceHealthChanged(node="n3", uuid="GPU-n3-1", health="Faulted"))
    status = pool_status(state, "a100")
    assert status["nodes"] == ["n3"]
    assert [d["uuid"] for d in status["devices"]] == ["GPU-n3-0", "GPU-n3-1"]
    assert status["capacity_slots"] == 1
    facts = pool_nodes(state, "a100")["n3"]
    assert (facts.healthy_units, facts.unhealthy_units) == (1, 1)
