"""A payload with no readable claim id is refused under its `Nats-Msg-Id` header only when that
header is itself a valid claim id. Found by the session-24 outsider: a garbage payload published
with a 5,000-character header made the claim service append to `gpu.evt.claim.<5,000 characters>`,
past nats-server's control line (4 KB); the server cut the connection, nats-py closed it for good
and the claim service stayed up without NATS, taking the message back at each start (one publish by
any publisher stopped every claim). An id like `a b` or `x*y` went into the log as a claim's id."""

from __future__ import annotations

import nats

from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import request, running

BAD_IDS = ["k" * 5000, "hdr x*y", "hdr>", "-starts-with-dash", "é"]


async def test_a_msg_id_that_is_no_claim_id_names_no_claim(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    async with running(fresh_nats.url, "claim"):
        js = nc.jetstream()
        for msg_id in BAD_IDS:
            await js.publish(subjects.INTAKE_CLAIMS, b"garbage", headers={"Nats-Msg-Id": msg_id})
        await js.publish(subjects.INTAKE_CLAIMS, b"not json either", headers={"Nats-Msg-Id": "good-id.1"})
        claim = b'{"claim_id": "after", "namespace": "team-a", "gpus": 0, "cpu_milli": 1}'
        await js.publish(subjects.INTAKE_CLAIMS, claim, headers={"Nats-Msg-Id": "after"})
        # the service is still there, has drained the intake (a get waits for it) and took the claim
        reply = await request(nc, subjects.query("claim.get"), {"claim_id": "after"}, timeout=15)
        assert reply["ok"] and reply["data"]["status"] != "rejected", reply
        named = {}
        async for stored in JetStreamEventLog(nc).read():
            for event in ev.flatten(stored.event):
                if isinstance(event, ev.ClaimRejected):
                    named.setdefault(stored.subject, []).append(event.claim_id)
    await nc.close()
    dead = named.pop(subjects.DEAD_LETTER + ".intake")
    # every refusal is dead-lettered; only the valid header names a claim, on that claim's subject
    assert sorted(dead) == sorted([""] * len(BAD_IDS) + ["good-id.1"])
    assert named == {subjects.claim("good-id.1"): ["good-id.1"]}
