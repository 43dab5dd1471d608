"""Rolling updates of the claim service (docs/reliability.md, "Rolling updates"): a replica of a
version before session 34 appends new claims where claims went before (a claim's own subject, the
intake batches' `gpu.evt.intake`), outside the submit fence, so beside a new replica one claim id
may be stored twice. No subject or permission tells its appends from the new version's other writes
there, and no fold could refuse them without every service's old replicas doing the same, so the
claim replicas are replaced together for that update; a new replica that sees such an append after
it started says so (ERROR, `gpuledger_claim_unfenced_submits_total`) instead of running on silently."""

from __future__ import annotations

import logging

import msgspec

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import running
from tests.waiting import until


def _submitted(claim_id: str) -> ev.ClaimSubmitted:
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace="team-a", gpus=1))


async def test_a_replica_without_the_fence_beside_this_one_is_said(fresh_client, fresh_nats, caplog):
    caplog.set_level(logging.ERROR, logger="gpuledger.claim")
    old_log = JetStreamEventLog(fresh_client)
    await old_log.append(subjects.claim("history-1"), _submitted("history-1"))  # before the start: history
    async with running(fresh_nats.url, "claim") as [ctx]:
        service = ctx.claims
        # what a replica before session 34 appends: a submit request's claim on its own subject, an
        # intake batch on gpu.evt.intake
        await old_log.append(subjects.claim("old-1"), _submitted("old-1"))
        await old_log.append(subjects.INTAKE_BATCHES, ev.EventBatch(events=[_submitted("old-2"), _submitted("old-3")]))
        # and a claim through the fence, as this version appends it: not counted
        await fresh_client.jetstream().publish(subjects.INTAKE_CLAIMS, msgspec.json.encode(
            {"claim_id": "new-1", "namespace": "team-a", "gpus": 1}), headers={"Nats-Msg-Id": "new-1"})
        assert await until(lambda: "new-1" in service.state.claims and "old-3" in service.state.claims)
        assert service.unfenced_submits == 3
        said = [r.getMessage() for r in caplog.records if "appended unfenced" in r.getMessage()]
        assert len(said) == 2, said  # the 1st and the 2nd (then the 4th, 8th, ...)
        assert "claim old-1 was appended unfenced on gpu.evt.claim.old-1" in said[0]
        assert "replace the claim replicas together" in said[0] and "Rolling updates" in said[0]
        scraped = ctx.metrics.registry
        from prometheus_client import generate_latest

        assert b"gpuledger_claim_unfenced_submits_total 3.0" in generate_latest(scraped)
