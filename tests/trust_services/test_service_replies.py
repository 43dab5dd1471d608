"""A service's user (a trusted writer, but one whose password sits in a process) may not make
nats-server put a message on a ledger subject it may not publish. Each service is alone in an
account of its own (`SVC_<NAME>`, shared.nats_auth) that reaches the streams only through imports,
so the acknowledgement of its publish, or a JetStream API answer, goes back to the reply subject
in its own account, where no stream listens and no other service subscribes. Before (session 32),
in the streams' account, each was stored on the subject it named: on the decision subject, a
claim's subject, a node's binding subject; a node's record and a claim's outcome replaced
(tests/trust_agents/hostile.py; docs/security.md)."""

from __future__ import annotations

import pytest

from schemas import subjects
from schemas.grants import decode_grants
from shared import nats_auth
from tests.trust_agents.hostile import provoke, targets


@pytest.mark.parametrize("user", nats_auth.SERVICES)
async def test_a_service_s_acks_and_api_answers_are_stored_nowhere(agents_server, ops, user):
    attacker = (await agents_server.connect(user)).nc
    role = next(r for r in nats_auth.service_roles() if r.user == user)
    found = await provoke(attacker, ops, role, "gpu-1", targets("gpu-2", "victim"), times=3)
    assert found.sent and found.stored == {}, found
    record = await ops.jetstream().get_last_msg(subjects.NODE_GRANTS_STREAM, subjects.node_grants("gpu-2"))
    assert decode_grants(record.data).node == "gpu-2"  # the node's record is its own still
