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


def record(through_seq: int, *claim_ids: str, fences: dict[str, int] | None = None) -> NodeGrants:
    """`fences`: each claim's fence as the allocator's fold saw it (0: nothing on its subjects)."""
    return NodeGrants(node=NODE, through_seq=through_seq, claims=[
        LiveClaim(claim_id=c, namespace="ns", grants=[Grant(node=NODE, uuid=f"GPU-{i}", index=i)],
                  fence=(fences or {}).get(c, 0))
        for i, c in enumerate(claim_ids)])


async def fences_now(log, *claim_ids: str) -> dict[str, int]:
    """Each claim's fence as the server has it now: what a record folded up to here carries."""
    return {c: await log.last_subject_seq(subjects.claim_fence(c)) for c in claim_ids}


def binder_on(log):
    binder = Binder(NODE, log, lambda: DEVICES, clock=lambda: 1.0)
    started = []
    binder.on_bound.append(lambda c: started.append(c.claim_id))
    return binder, started
