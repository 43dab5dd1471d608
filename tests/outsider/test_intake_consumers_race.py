"""The claim service's two intake consumers (the plain intake's and the publishing systems') see
each other's claims before they are folded.

Found by the session-33 outsider: each consumer validates a drained batch against the fold and the
batch itself, then appends it, and a claim one of them took is not in the fold until its batch is
read back. 200 new ids each published at once by the shared publisher and by `system-billing`
(load 5-15): 10 were appended twice (the fold kept the first, the other sender never had an
outcome), and 25 more were appended alone under the id as their msg id, the second deduplicated
away by JetStream without a word: 35 senders waited for ever. And a malformed payload naming an id
the other consumer had just appended in an EventBatch (the claim's own subject still empty) was
refused on that subject, where the fold ends a pending claim on its refusal (session 31's open
"refusal's fence" item). A submit request (`gpu.cmd.claim.submit`) the same: taken while an intake batch
held its id unfolded, it was appended too and answered with the other claim's view (its namespace,
devices and env), `duplicate: false`. Here the two run side by side in one service, the second
while the first's append is on its way, as the consumers and the requests do.
"""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.systems import parse_systems
from services.claim.app import ClaimService
from schemas.types import ClaimSpec
from services.claim.intake import handle_intake_batch
from shared.commands import DomainError
from shared.jetstream import JetStreamEventLog, ensure_streams

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def service(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    await ensure_streams(nc.jetstream())
    claims = ClaimService(JetStreamEventLog(nc), systems=parse_systems("billing:team-a"))
    follow = asyncio.create_task(claims.follower.run())
    await asyncio.wait_for(claims.follower.caught_up.wait(), 60)
    yield claims
    follow.cancel()
    await nc.close()


def claim(claim_id: str, **fields) -> bytes:
    return json.dumps({"claim_id": claim_id, "namespace": "team-a", "gpus": 0, "cpu_milli": 1, **fields}).encode()


async def stored(service, kind) -> list[tuple[str, ev.Event]]:
    last = await service.log.last_seq()
    out = []
    async for item in service.log.read(1, last):
        events = item.event.events if isinstance(item.event, ev.EventBatch) else [item.event]
        out += [(item.subject, e) for e in events if isinstance(e, kind)]
    return out


async def test_one_id_taken_by_both_consumers_at_once_is_one_claim_and_one_refusal(service):
    # the plain consumer's batch and the systems' one, the second drained while the first appends
    plain = handle_intake_batch(service, [(claim("both-1"), {}, 1, ""), (claim("plain-2"), {}, 2, "")])
    system = handle_intake_batch(service, [(claim("both-1", cpu_milli=2), {}, 3, "billing")])
    await asyncio.gather(plain, system)
    submitted = [e.claim.claim_id for _, e in await stored(service, ev.ClaimSubmitted)]
    assert submitted.count("both-1") == 1, submitted
    refusals = [(s, e) for s, e in await stored(service, ev.ClaimRejected) if e.claim_id == "both-1"]
    assert [(s, e.code) for s, e in refusals] == [(subjects.DEAD_LETTER + ".intake", "conflict")], refusals
    assert refusals[0][1].reasons[0].detail.get("system") == "billing"


async def test_a_malformed_payload_naming_an_id_the_other_consumer_took_leaves_the_claim(service):
    batch = handle_intake_batch(service, [(claim("held-1"), {}, 1, ""), (claim("held-2"), {}, 2, "")])
    bad = handle_intake_batch(service, [(claim("held-1", gpus=-1), {}, 3, "billing")])
    await asyncio.gather(batch, bad)
    await asyncio.sleep(0.2)  # anything appended by now is folded by the next look
    assert service.state.claims["held-1"].status == "pending", service.state.claims["held-1"].status
    on_subject = [e for s, e in await stored(service, ev.ClaimRejected) if s == subjects.claim("held-1")]
    assert not on_subject, on_subject


async def test_a_submit_request_for_an_id_an_intake_batch_took_is_refused(service):
    batch = handle_intake_batch(service, [(claim("sub-1"), {}, 1, ""), (claim("sub-2"), {}, 2, "")])
    spec = ClaimSpec(claim_id="sub-1", namespace="team-a", gpus=0, cpu_milli=3)
    _, answer = await asyncio.gather(batch, service.submit(spec, system="billing"), return_exceptions=True)
    assert isinstance(answer, DomainError) and answer.code == "conflict", answer
    submitted = [e.claim.claim_id for _, e in await stored(service, ev.ClaimSubmitted)]
    assert submitted.count("sub-1") == 1, submitted


async def test_an_intake_claim_for_an_id_a_submit_request_took_is_refused(service):
    spec = ClaimSpec(claim_id="req-1", namespace="team-a", gpus=0, cpu_milli=3)
    submit = service.submit(spec, system="billing")
    batch = handle_intake_batch(service, [(claim("req-1"), {}, 1, ""), (claim("req-2"), {}, 2, "")])
    answer, _ = await asyncio.gather(submit, batch)
    assert answer["claim_id"] == "req-1" and answer.get("system") == "billing", answer
    submitted = [e.claim.claim_id for _, e in await stored(service, ev.ClaimSubmitted)]
    assert submitted.count("req-1") == 1, submitted
