"""What the binding-race tests share: one node's agent (its Binder), its records, and a client on a
real nats-server with the streams made."""

from __future__ import annotations

import pytest

from schemas.grants import LiveClaim, NodeGrants
from schemas.types import DeviceInfo, Grant
from services.node_agent.binder import Binder

NODE = "n1"
DEVICES = {f"GPU-{i}": DeviceInfo(uuid=f"GPU-{i}", index=i, model="H100", memory_mib=81559) for i in range(8)}


@pytest.fixture
def nc(fresh_client):
    return fresh_client


def record(through_seq: int, *claim_ids: str) -> NodeGrants:
    return NodeGrants(node=NODE, through_seq=through_seq, claims=[
        LiveClaim(claim_id=c, namespace="ns", grants=[Grant(node=NODE, uuid=f"GPU-{i}", index=i)])
        for i, c in enumerate(claim_ids)])


def binder_on(log):
    binder = Binder(NODE, log, lambda: DEVICES, clock=lambda: 1.0)
    started = []
    binder.on_bound.append(lambda c: started.append(c.claim_id))
    return binder, started
