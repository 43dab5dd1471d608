"""Two claim-service replicas taking one new claim id at the same moment (session 33's outsider).

Each replica checks a claim against its own fold and the claims it has in flight; the other
replica's claim, appended a moment ago, is in neither, and an intake batch is appended under a
batch msg id, so JetStream's dedup does not see the claim id either: both appended it (the fold kept
the first, the second sender had no outcome of its own or was told about the other's claim). Here
two ClaimService objects, each with its own connection and fold, on one nats-server, handle the
same id at once: the second's checks run while the first's append is on its way, as two replicas'
would. Every new claim is now appended on `gpu.evt.submit` on condition of that subject's last
sequence (services/claim/intake_fence.py): the second append is refused by the server, the second
replica folds the first's claim and answers as a single replica answers a repeat or a conflict.
"""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.systems import parse_systems
from schemas.types import ClaimSpec
from services.claim.app import ClaimService
from services.claim.intake import handle_intake_batch
from shared.commands import DomainError
from shared.jetstream import JetStreamEventLog, ensure_streams

pytestmark = pytest.mark.timeout(120)


async def _replica(url: str):
    nc = await nats.connect(url)
    await ensure_streams(nc.jetstream())
    claims = ClaimService(JetStreamEventLog(nc), systems=parse_systems("billing:team-a;audit:team-a"))
    follow = asyncio.create_task(claims.follower.run())
    await asyncio.wait_for(claims.follower.caught_up.wait(), 60)
    return claims, follow, nc


@pytest.fixture
async def two(fresh_nats):
    started = [await _replica(fresh_nats.url) for _ in range(2)]
    yield started[0][0], started[1][0]
    for _claims, follow, nc in started:
        follow.cancel()
        await nc.close()


def claim(claim_id: str, **fields) -> bytes:
    return json.dumps({"claim_id": claim_id, "namespace": "team-a", "gpus": 0, "cpu_milli": 1, **fields}).encode()


def spec(claim_id: str, **fields) -> ClaimSpec:
    return ClaimSpec(**({"claim_id": claim_id, "namespace": "team-a", "gpus": 0, "cpu_milli": 1} | fields))


async def stored(service, kind) -> list[tuple[str, ev.Event]]:
    last = await service.log.last_seq()
    out = []
    async for item in service.log.read(1, last):
        events = item.event.events if isinstance(item.event, ev.EventBatch) else [item.event]
        out += [(item.subject, e) for e in events if isinstance(e, kind)]
    return out


async def submitted(service, claim_id: str) -> list[ev.ClaimSubmitted]:
    return [e for _, e in await stored(service, ev.ClaimSubmitted) if e.claim.claim_id == claim_id]


async def test_one_id_in_both_replicas_intake_batches_is_appended_once(two):
    a, b = two
    # the same claim published twice (a publisher's retry with another msg id), drained by both
    await asyncio.gather(handle_intake_batch(a, [(claim("both-1"), {}, 1, ""), (claim("a-2"), {}, 2, "")]),
                         handle_intake_batch(b, [(claim("both-1"), {}, 3, ""), (claim("b-2"), {}, 4, "")]))
    assert len(await submitted(a, "both-1")) == 1
    for claim_id in ("a-2", "b-2"):  # the rest of each batch is stored
        assert len(await submitted(a, claim_id)) == 1, claim_id
    await b.follower.wait_for_seq(await b.log.last_seq())
    assert b.state.claims["both-1"].status == "pending" and not b.in_flight and not a.in_flight


async def test_a_different_claim_with_the_id_in_the_other_replica_is_refused_conflict(two):
    a, b = two
    await asyncio.gather(handle_intake_batch(a, [(claim("diff-1"), {}, 1, ""), (claim("diff-2"), {}, 2, "")]),
                         handle_intake_batch(b, [(claim("diff-1", cpu_milli=2), {}, 3, "")]))
    [kept] = await submitted(a, "diff-1")
    refusals = [(s, e.code) for s, e in await stored(a, ev.ClaimRejected) if e.claim_id == "diff-1"]
    # a dead letter only: on the claim's subject a refusal would end the first sender's claim
    assert refusals == [(subjects.DEAD_LETTER + ".intake", "conflict")], refusals
    await a.follower.wait_for_seq(await a.log.last_seq())
    assert a.state.claims["diff-1"].status == "pending"


async def test_another_systems_claim_with_the_id_gets_its_refusal_as_its_outcome(two):
    a, b = two
    await asyncio.gather(handle_intake_batch(a, [(claim("sys-1"), {}, 1, "billing"), (claim("sys-2"), {}, 2, "billing")]),
                         handle_intake_batch(b, [(claim("sys-1"), {}, 3, "audit")]))
    [kept] = await submitted(a, "sys-1")
    loser = {"billing": "audit", "audit": "billing"}[kept.system]  # whichever append the server took first
    js = a.log.nc.jetstream()
    outcome = json.loads((await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome("sys-1", loser))).data)
    assert outcome["status"] == "rejected" and outcome["final"], outcome


async def test_a_submit_request_in_one_replica_and_an_intake_batch_in_the_other(two):
    a, b = two
    answer, _ = await asyncio.gather(a.submit(spec("req-1")),
                                     handle_intake_batch(b, [(claim("req-1"), {}, 1, ""), (claim("req-2"), {}, 2, "")]))
    assert answer["claim_id"] == "req-1"
    assert len(await submitted(a, "req-1")) == 1


async def test_an_intake_batch_in_one_replica_and_a_different_submit_in_the_other(two):
    a, b = two
    _, answer = await asyncio.gather(handle_intake_batch(a, [(claim("sub-1"), {}, 1, ""), (claim("sub-2"), {}, 2, "")]),
                                     b.submit(spec("sub-1", cpu_milli=3)), return_exceptions=True)
    [kept] = await submitted(a, "sub-1")
    dead = [e.code for s, e in await stored(a, ev.ClaimRejected) if e.claim_id == "sub-1"]
    if kept.claim.cpu_milli == 3:  # the submit came first: the batch's claim is refused
        assert answer["claim_id"] == "sub-1" and not answer["duplicate"] and dead == ["conflict"], (answer, dead)
    else:  # the batch came first: the submit is refused, as a single replica refuses it
        assert isinstance(answer, DomainError) and answer.code == "conflict" and not dead, (answer, dead)


async def test_the_same_submit_in_both_replicas_is_one_claim_and_one_duplicate(two):
    # a submit request without a queue group reaches every replica (before session 34)
    a, b = two
    first, second = await asyncio.gather(a.submit(spec("twice-1")), b.submit(spec("twice-1")))
    assert sorted([first["duplicate"], second["duplicate"]]) == [False, True], (first, second)
    assert len(await submitted(a, "twice-1")) == 1


async def test_two_different_submits_in_the_two_replicas_one_is_refused(two):
    a, b = two
    answers = await asyncio.gather(a.submit(spec("two-1")), b.submit(spec("two-1", cpu_milli=5)),
                                   return_exceptions=True)
    refused = [x for x in answers if isinstance(x, DomainError)]
    assert len(refused) == 1 and refused[0].code == "conflict", answers
    assert len(await submitted(a, "two-1")) == 1


async def test_a_malformed_payload_naming_an_id_the_other_replica_took_leaves_the_claim(two):
    a, b = two
    await asyncio.gather(handle_intake_batch(a, [(claim("held-1"), {}, 1, ""), (claim("held-2"), {}, 2, "")]),
                         handle_intake_batch(b, [(claim("held-1", gpus=-1), {}, 3, "")]))
    await a.follower.wait_for_seq(await a.log.last_seq())
    assert a.state.claims["held-1"].status == "pending", a.state.claims["held-1"].status
    # a refusal on the claim's subject may only come before the claim (the id was free then)
    claimed = a.state.claims["held-1"].seq
    on_subject = [item.seq async for item in a.log.read(1, await a.log.last_seq(), subject=subjects.claim("held-1"))
                  if isinstance(item.event, ev.ClaimRejected)]
    assert all(seq < claimed for seq in on_subject), (on_subject, claimed)


async def test_a_refusal_on_a_free_id_is_still_written_on_its_subject(two):
    # the fence refuses a refusal only when a claim came: on a free id it is stored as before
    a, b = two
    await handle_intake_batch(b, [(claim("bad-1", gpus=-1), {}, 1, "")])
    on_subject = [e.code for s, e in await stored(a, ev.ClaimRejected) if s == subjects.claim("bad-1")]
    assert on_subject == ["invalid"], on_subject
