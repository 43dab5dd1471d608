"""What the binding-race tests share: one node's agent (its Binder), its records, and a client on a
real nats-server with the streams made."""

from __future__ import annotations

import pytest

from schemas import subjects
from schemas.grants import LiveClaim, NodeGrants
from schemas.types import DeviceInfo, Grant
from services.node_agent.binder import Binder

NODE = "n1"
DEVICES = {f"GPU-{i}": DeviceInfo(uuid=f"GPU-{i}", index=i, model="H100", memory_mib=81559) for i in range(8)}


@pytest.fixture
def nc(fresh_client):
    return fresh_client


def record(through_seq: int, *claim_ids: str, fence: int = 0) -> NodeGrants:
    """`fence`: the node's fence as the allocator's fold saw it (0: nothing on its subjects)."""
    return NodeGrants(node=NODE, through_seq=through_seq, fence=fence, claims=[
        LiveClaim(claim_id=c, namespace="ns", grants=[Grant(node=NODE, uuid=f"GPU-{i}", index=i)])
        for i, c in enumerate(claim_ids)])


async def fence_now(log) -> int:
    """The node's fence as the server has it now: what a record folded up to here carries."""
    return await log.last_subject_seq(subjects.node_fence(NODE))


def binder_on(log):
    binder = Binder(NODE, log, lambda: DEVICES, clock=lambda: 1.0)
    started = []
    binder.on_bound.append(lambda c: started.append(c.claim_id))
    return binder, started
