"""A message on an intake subject no consumer takes (`gpu.intake.other`, `gpu.intake.claim.a.b`:
stored by the work-queue stream `gpu.intake.>`, which only ops may publish to) does not hold up
every lookup that waits for the intake to drain. Found by the session-24 outsider: one such
publish made every `claim get|explain|release|renew` of an id the service did not know, and every
prefix the CLI resolves, wait the drain's whole 5 s, for good (the message never ages out)."""

from __future__ import annotations

import asyncio

import nats

from schemas import subjects
from services.claim.intake import wait_intake_drained
from tests.service.helpers import request, running


async def test_a_message_no_consumer_takes_does_not_hold_up_the_drain(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    js = nc.jetstream()
    async with running(fresh_nats.url, "claim"):
        for stray in ("gpu.intake.other", "gpu.intake.claim.a.b"):
            await js.publish(stray, b'{"claim_id": "stray", "namespace": "team-a"}')
        claim = b'{"claim_id": "%s", "namespace": "team-a", "gpus": 0, "cpu_milli": 1}'
        await js.publish(subjects.INTAKE_CLAIMS, claim % b"plain")
        await js.publish(subjects.INTAKE_CLAIMS + ".billing", claim % b"billing-1")
        # over long before its own limit (the old wait ran to it, an hour here)
        await asyncio.wait_for(wait_intake_drained(js, timeout=3600), 60)
        # what was published before is handled (read your writes), the strays are still there
        for claim_id in ("plain", "billing-1"):
            reply = await request(nc, subjects.query("claim.get"), {"claim_id": claim_id})
            assert reply["ok"], reply
        assert (await js.stream_info(subjects.INTAKE_STREAM)).state.messages == 2
    await nc.close()
