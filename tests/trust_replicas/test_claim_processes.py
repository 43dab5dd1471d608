"""Two whole claim services (`start_service`, as `gpuledger service claim` runs them) on one
nats-server, as deploy/k8s runs them (`replicas: 2`): the same ids come through the durable intake
(a publisher) and as submit requests at once. Each id must be stored once and every sender
answered: the intake acked (drained), each submit request answered once, each claim's outcome
written. Before session 34 a submit request reached both replicas (no queue group) and an id
taken by both at once was stored twice (tests/trust_replicas/test_claim_replicas.py).
"""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from schemas import commands as cmd
from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from services.claim.app import build
from services.claim.intake import wait_intake_drained
from shared import rpc
from shared.service import start_service, stop_service
from shared.settings import Settings
from tests.waiting import until

pytestmark = pytest.mark.timeout(240)
IDS = 120
WAVE = 4


@pytest.fixture
async def replicas(fresh_nats):
    started = [await start_service("claim", Settings(nats_url=fresh_nats.url), build) for _ in range(2)]
    for ctx in started:
        await asyncio.wait_for(ctx.claims.follower.caught_up.wait(), 60)
    yield started
    for ctx in started:
        await stop_service(ctx)


def spec(claim_id: str) -> ClaimSpec:
    return ClaimSpec(claim_id=claim_id, namespace="team-a", gpus=0, cpu_milli=1)


async def test_the_same_ids_through_the_intake_and_submit_requests_are_stored_once(replicas, fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    try:
        js = nc.jetstream()
        ids = [f"r-{i}" for i in range(IDS)]

        async def publish(claim_id: str) -> None:
            payload = json.dumps({"claim_id": claim_id, "namespace": "team-a", "gpus": 0, "cpu_milli": 1})
            await js.publish(subjects.INTAKE_CLAIMS, payload.encode(), headers={"Nats-Msg-Id": f"pub-{claim_id}"})

        async def submit(claim_id: str):
            return await rpc.call(nc, subjects.command("claim.submit"), cmd.SubmitClaim(claim=spec(claim_id)))

        # every id both ways at once, a few ids at a time (so that both replicas are busy at once,
        # each draining the intake and answering submits)
        answers = []
        for wave in range(0, IDS, WAVE):
            results = await asyncio.gather(*(f(c) for c in ids[wave:wave + WAVE] for f in (publish, submit)))
            answers += [r for r in results if r is not None]
        assert len(answers) == IDS and all(a.ok for a in answers), [a for a in answers if not a.ok][:3]
        await wait_intake_drained(js, timeout=60)
        log = replicas[0].log
        last = await log.last_seq()
        counts: dict[str, int] = {}
        async for item in log.read(1, last):
            events = item.event.events if isinstance(item.event, ev.EventBatch) else [item.event]
            for event in events:
                if isinstance(event, ev.ClaimSubmitted):
                    counts[event.claim.claim_id] = counts.get(event.claim.claim_id, 0) + 1
        assert {c: n for c, n in counts.items() if n != 1} == {} and sorted(counts) == sorted(ids)

        async def outcomes_written() -> bool:
            for claim_id in ids:
                try:
                    await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome(claim_id))
                except nats.js.errors.NotFoundError:
                    return False
            return True
        # held back while pending (outcomes.py: PENDING_AFTER_S, or until the allocator explains)
        assert await until(outcomes_written, 60)
    finally:
        await nc.close()


async def test_a_submit_request_is_handled_by_one_replica(replicas, fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    try:
        handled: list[str] = []
        for ctx in replicas:
            original = ctx.claims.submit

            async def counted(*args, _original=original, _name=str(id(ctx)), **kwargs):
                handled.append(_name)
                return await _original(*args, **kwargs)
            ctx.claims.submit = counted
        for i in range(20):
            reply = await rpc.call(nc, subjects.command("claim.submit"), cmd.SubmitClaim(claim=spec(f"one-{i}")))
            assert reply.ok, reply
        await asyncio.sleep(0.5)  # a second replica's handling, if any, has begun by now
        assert len(handled) == 20, len(handled)
    finally:
        await nc.close()
