"""Followers that need no binding (quota, pool-controller) skip a node's binding subject undecoded:
the position moves past each such message, nothing of it is folded or told to the hooks. A bound
claim holds what it held allocated, so what those services answer is the same either way."""

import pytest

from schemas import events as ev
from schemas import subjects
from ledger.follower import Follower
from shared.eventlog import InMemoryEventLog
from shared.jetstream import JetStreamEventLog
from shared.settings import Settings
from services.pool_controller.admission import AdmissionConfig
from services.pool_controller.app import PoolController
from services.pool_controller.validation import ClusterFacts
from services.quota.app import QuotaService
from tests.speed.test_follower import running, stop, submitted, write_history


@pytest.fixture
def log(fresh_client):
    return JetStreamEventLog(fresh_client)


def bound(claim_id):
    return ev.ClaimBound(claim_id=claim_id, node="n0", env={"CUDA_VISIBLE_DEVICES": "0"})


def test_only_a_nodes_binding_subject_is_one():
    assert subjects.is_node_bindings(subjects.node_bindings("n0"))
    assert subjects.is_node_bindings(subjects.node_bindings("node.with.dots"))  # tokens have no dots
    for other in (subjects.node("bound"), subjects.node("n0"), subjects.node_fence("n0"),
                  subjects.node_releases("n0"), subjects.claim("bound"), subjects.DECISIONS,
                  subjects.INTAKE_BATCHES, "gpu.evt.node.n0.x.bound"):
        assert not subjects.is_node_bindings(other), other


async def test_bindings_are_skipped_undecoded_in_the_catch_up_and_the_live_tail(log):
    await write_history(log)  # c0..c7 allocated on n0, c0..c5 released
    await log.append(subjects.node_bindings("n0"), bound("c7"))
    await log.append_raw(subjects.node_bindings("n0"), b"not an event")
    skipping, reading, told = Follower(log, unread=subjects.is_node_bindings), Follower(log), []
    skipping.listeners.append(lambda seq, subject, e: told.append(type(e).__name__))
    tasks = [await running(skipping), await running(reading)]
    try:
        end = await log.last_seq()
        assert skipping.last_seq == end and skipping.admission.undecodable == 0
        assert skipping.state.claims["c7"].status == "allocated"
        await log.append(subjects.node_bindings("n0"), bound("c6"))
        await log.append_raw(subjects.node_bindings("n0"), b"not an event either")
        late = await log.append(subjects.node_bindings("n0"), bound("c6"))  # the last one stored
        assert await skipping.wait_for_seq(late.seq) and await reading.wait_for_seq(late.seq)
    finally:
        for task in tasks:
            await stop(task)
    assert skipping.admission.undecodable == 0 and skipping.last_seq == late.seq
    assert skipping.state.claims["c6"].status == "allocated" and "ClaimBound" not in told
    # the same log read whole: bound, and the garbage counted
    assert reading.state.claims["c6"].status == reading.state.claims["c7"].status == "bound"
    assert reading.admission.undecodable == 2
    assert skipping.state.claims.keys() == reading.state.claims.keys()
    assert skipping.state.usage == reading.state.usage


def _services():
    quota = QuotaService(InMemoryEventLog(), Settings())
    pools = PoolController(InMemoryEventLog(), ClusterFacts("1.30", False), AdmissionConfig("", (), ()))
    return [quota.follower, pools.follower]


@pytest.mark.parametrize("follower", _services(), ids=["quota", "pool-controller"])
def test_quota_and_the_pool_controller_read_no_binding(follower):
    follower._end_catch_up()
    follower._fold_live([(1, subjects.claim("c1"), ev.encode_event(submitted("c1")), None),
                         (2, subjects.node_bindings("n0"), b"not an event", None),
                         (3, subjects.node_bindings("n0"), ev.encode_event(bound("c1")), None)])
    assert follower.last_seq == 3 and follower.admission.undecodable == 0
    assert follower.state.claims["c1"].status == "pending"
