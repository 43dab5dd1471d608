"""Two pools whose names differ only by '.' against '_' would share one subject. Found by the
session-25 outsider: `gpuledger pool create` made `p.1` and then `p_1`, both on `gpu.evt.pool.p_1`,
where claims, quotas and (now) endpoints refuse the second name."""

from __future__ import annotations

from schemas import events as ev
from schemas.commands import CreatePool, Reply
from services.pool_controller.decisions import Append, decide_create
from services.pool_controller.validation import ClusterFacts
from tests.pool_controller.fixtures import pool, state_of


def test_a_pool_that_would_share_a_subject_is_refused_naming_the_other():
    state = state_of(ev.PoolCreated(pool=pool(name="gpu.a")))
    refused = decide_create(state, CreatePool(pool=pool(name="gpu_a")), ClusterFacts(), now=0)
    assert isinstance(refused, Reply) and refused.error.code == "conflict" and refused.error.field == "pool.name"
    assert "would share the subject gpu.evt.pool.gpu_a with pool gpu.a" in refused.error.message
    assert isinstance(decide_create(state, CreatePool(pool=pool(name="gpu-a")), ClusterFacts(), now=0), Append)
