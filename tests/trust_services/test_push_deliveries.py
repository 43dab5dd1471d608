"""A push consumer delivers in its stream's account (LEDGER), whoever asked for it, onto the deliver
subject named in the create request's body, which no permission sees. Every user that may make
consumers (the services, the node agents) is in an account of its own; a publisher's live outcomes
come to PUBLIC straight from the claim service's account (shared.nats_auth.published_imports), so
nothing in LEDGER subscribes there: a push consumer aimed at a claim's outcome subject, while a
publisher waits for it, delivers to no one and nothing is stored. Before, the publisher received
the delivery and the outcome stream stored it (docs/security.md)."""

from __future__ import annotations

import nats
import pytest

from schemas import subjects
from shared import nats_auth
from tests.trust_agents.hostile import may_publish, push_onto, targets

ATTACKERS = [(u, "gpu-1") for u in nats_auth.SERVICES] + [("node-gpu-1", "gpu-1"), (nats_auth.DEMO_AGENTS, "sim-a")]


def _role(user: str, node: str) -> nats_auth.Role:
    if user.startswith("node-"):
        return nats_auth.node_role(user, [node], simulated=user == nats_auth.DEMO_AGENTS)
    return next(r for r in nats_auth.service_roles() if r.user == user)


@pytest.mark.parametrize("user, node", ATTACKERS)
async def test_a_push_consumer_aimed_at_a_waiting_publisher_delivers_nothing(agents_server, ops, user, node):
    # a message in the log too, for the consumers on it to deliver
    await ops.jetstream().publish(f"{subjects.DEAD_LETTER}.seed", b"{}", stream=subjects.STREAM)
    attacker = (await agents_server.connect(user)).nc
    publisher = await nats.connect(agents_server.url(nats_auth.PUBLISHER))
    try:
        role = _role(user, node)
        aims = [a for a in targets("gpu-2", "victim") if a.startswith("gpu.outcome.") and not may_publish(role, a)]
        if not aims:
            pytest.skip(f"{user} may publish outcomes itself")
        found = await push_onto(attacker, ops, role, node, aims, publisher, ops_listens=False)
        assert found.made and (found.heard, found.stored) == (0, 0), found
    finally:
        await publisher.close()
