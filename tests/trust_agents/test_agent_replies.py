"""A node agent is the least trusted writer (one runs on every GPU node): whatever reply it makes
nats-server send (a JetStream acknowledgement, a JetStream API answer) must land nowhere stored.
Its users live in an account of their own (AGENTS, shared.nats_auth) that reaches the ledger only
through imports, so the answer goes back to the reply subject in AGENTS, where no stream listens.
Before, in the streams' account, each was stored on the subject it named, replacing the other
node's record and a claim's outcome (tests/trust_agents/hostile.py; docs/security.md)."""

from __future__ import annotations

import pytest

from schemas import subjects
from schemas.grants import decode_grants
from shared import nats_auth
from tests.trust_agents.hostile import provoke, targets


@pytest.mark.parametrize("user, node, victim", [("node-gpu-1", "gpu-1", "gpu-2"),
                                                (nats_auth.DEMO_AGENTS, "sim-a", "gpu-2")])
async def test_a_node_agent_s_acks_and_api_answers_are_stored_nowhere(agents_server, ops, user, node, victim):
    attacker = (await agents_server.connect(user)).nc
    role = nats_auth.node_role(user, [node], simulated=user == nats_auth.DEMO_AGENTS)
    found = await provoke(attacker, ops, role, node, targets(victim, "victim"), times=5)
    assert found.sent and found.stored == {}, found
    record = await ops.jetstream().get_last_msg(subjects.NODE_GRANTS_STREAM, subjects.node_grants(victim))
    assert decode_grants(record.data).node == victim  # the other node's record is its own still
