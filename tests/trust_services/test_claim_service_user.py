"""A publisher's live outcomes come from the claim user's account only (shared.nats_auth
`published_imports`), so the real claim service, run as its own `claim` user (as `gpuledger up`,
docker-compose and deploy/k8s run it), reaches a publisher waiting on its claim's outcome subject;
run as another user (`ops`), it says so loudly at start instead of failing silently (session 33's
tests ran it as ops, and a Node.js publisher got no live outcome)."""

from __future__ import annotations

import logging

import msgspec
import nats
import pytest

from schemas import subjects
from shared import nats_auth
from tests.service.helpers import running


async def _rejected_outcome_live(server, url) -> dict:
    """Submit an invalid claim as the publisher and wait for its outcome on the live subject: the
    claim service alone answers it (rejected, final), no allocator needed."""
    publisher = await nats.connect(server.url(nats_auth.PUBLISHER))
    try:
        waiting = await publisher.subscribe(subjects.outcome("live-1"))
        await publisher.flush()
        async with running(url, "claim"):
            await publisher.jetstream().publish(subjects.INTAKE_CLAIMS, msgspec.json.encode(
                {"claim_id": "live-1", "namespace": "team-a", "gpus": 0}), headers={"Nats-Msg-Id": "live-1"})
            return msgspec.json.decode((await waiting.next_msg(timeout=30)).data)
    finally:
        await publisher.close()


async def test_the_claim_service_as_its_own_user_reaches_a_waiting_publisher(agents_server, ops):
    outcome = await _rejected_outcome_live(agents_server, agents_server.url)
    assert outcome["type"] == "ClaimOutcome" and outcome["claim_id"] == "live-1"
    assert outcome["status"] == "rejected" and outcome["final"]


async def test_the_claim_service_as_ops_says_publishers_get_no_live_outcomes(agents_server, ops, caplog):
    caplog.set_level(logging.WARNING, logger="gpuledger")
    async with running(agents_server.url(nats_auth.OPS), "claim"):
        pass
    said = [r.getMessage() for r in caplog.records if "connected to NATS as user 'ops'" in r.getMessage()]
    assert len(said) == 1 and "will receive none live" in said[0] and "nats creds claim" in said[0], said


@pytest.mark.parametrize("service, url, says", [
    ("claim", "nats://claim:pw@127.0.0.1:4222", None),
    ("claim", "nats://127.0.0.1:4222", None),  # an open server (`up --no-auth`), or an nkey seed
    ("claim", "nats://ops:pw@127.0.0.1:4222,nats://ops:pw@127.0.0.1:4223", "receive none live"),
    ("allocator", "nats://ops:pw@127.0.0.1:4222", "that user's rights and account"),
    ("node-agent-test", "nats://ops:pw@127.0.0.1:4222", None),  # not one of the services' users
])
def test_which_starts_are_said(service, url, says):
    warning = nats_auth.foreign_user_warning(service, url)
    assert (warning is None) if says is None else (says in warning)
