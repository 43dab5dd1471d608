"""No poison (issue 16, item 3 and 4): a message that cannot be decoded or handled is dead-lettered
once with its reason and never stops the messages behind it; extreme numbers are refused at the
intake, and the pure core does not crash on them if they are in the log anyway."""

from __future__ import annotations

import asyncio
import json

import msgspec
import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from ledger import node_claims
from services.claim.intake import decode_claim
from shared.jetstream import JetStreamEventLog
from tests.fleet import Ledger, h100_node
from tests.service.helpers import h100_node as service_node, register_nodes, request, running

DEEP = b'{"claim_id": "deep", "namespace": "a", "labels": ' + b"[" * 1000 + b"]" * 1000 + b"}"
BAD_UTF8 = b'{"claim_id": "utf", "namespace": "a\xff\xfe"}'
POISON = [BAD_UTF8, DEEP, b"[" * 200_000, b'{"type": "ClaimReleased", "claim_id": "x"}', b"\x00\x01"]


async def dead_letters(js) -> list[ev.ClaimRejected]:
    found, seq = [], 1
    while True:
        try:
            raw = await js.get_msg(subjects.STREAM, seq=seq, subject=subjects.DEAD_LETTER + ".intake", next=True)
        except nats.js.errors.NotFoundError:
            return found
        found.append(ev.decode_event(raw.data))
        seq = raw.seq + 1


async def status_of(nc, claim_id: str) -> str:
    reply = await request(nc, subjects.query("claim.get"), {"claim_id": claim_id})
    return reply["data"]["status"] if reply["ok"] else reply["error"]["code"]


async def wait_status(nc, claim_id: str, wanted: str, timeout: float = 20.0) -> str:
    status = ""
    for _ in range(int(timeout * 10)):
        status = await status_of(nc, claim_id)
        if status == wanted:
            break
        await asyncio.sleep(0.1)
    return status


@pytest.fixture
async def stack(fresh_nats):
    async with running(fresh_nats.url, "claim", "allocator", "quota") as contexts:
        nc = await nats.connect(fresh_nats.url)
        # a cap of 1,000 live claims (session 33: 190 by default), for the 400 claims of one test
        node = msgspec.structs.replace(service_node("n0"), labels={node_claims.LABEL: "1000"})
        await register_nodes(JetStreamEventLog(nc), node)
        yield nc, contexts
        await nc.close()


async def test_poison_on_the_intake_is_dead_lettered_once_and_never_blocks(stack):
    nc, _ = stack
    js = nc.jetstream()
    for payload in POISON:
        await js.publish(subjects.INTAKE_CLAIMS, payload)
    await js.publish(subjects.INTAKE_CLAIMS, json.dumps({"claim_id": "behind", "namespace": "a"}).encode())
    assert await wait_status(nc, "behind", "allocated") == "allocated"
    for _ in range(50):
        if (await js.stream_info(subjects.INTAKE_STREAM)).state.messages == 0:
            break
        await asyncio.sleep(0.1)
    assert (await js.stream_info(subjects.INTAKE_STREAM)).state.messages == 0
    letters = await dead_letters(js)
    assert len(letters) == len(POISON), [letter.reasons[0].message for letter in letters]
    assert all(letter.reasons and letter.reasons[0].message for letter in letters)
    assert any("UTF-8" in letter.reasons[0].message or "utf-8" in letter.reasons[0].message
               for letter in letters)


async def test_a_drained_batch_larger_than_the_message_limit_is_split(stack):
    nc, _ = stack
    js = nc.jetstream()
    text = "w" * 1000
    labels = {f"k{i}": "v" * 200 for i in range(20)}  # ~5 KB a claim: 256 of them pass 1 MiB
    ids = [f"big-{i}" for i in range(400)]
    acks = [js.publish(subjects.INTAKE_CLAIMS, msgspec.json.encode(
        {"claim_id": claim_id, "namespace": "a", "gpus": 0, "cpu_milli": 1, "workload": text, "labels": labels}))
        for claim_id in ids]
    await asyncio.gather(*acks)
    assert await wait_status(nc, ids[-1], "allocated", timeout=60) == "allocated"
    statuses = {await status_of(nc, claim_id) for claim_id in ids[::37]}
    assert statuses <= {"allocated", "pending"}, statuses
    assert not await dead_letters(js)


@pytest.mark.parametrize("subject, payload", [
    (subjects.command("claim.submit"), b'{"claim": {"claim_id": "u", "namespace": "a\xff\xfe"}}'),
    (subjects.query("claim.get"), b'{"claim_id": "\xc3\x28"}'),
    (subjects.command("claim.release"), b'{"claim_id": "x", "reason": "\xff"}'),
    (subjects.command("quota.set"), b'{"namespace": "\xe2\x82"}'),
    (subjects.command("claim.submit"), b"[" * 200_000),
    (subjects.query("claim.get"), b"\xff")])
async def test_request_subjects_answer_poison_with_a_clear_error(stack, subject, payload):
    nc, _ = stack
    reply = msgspec.json.decode((await nc.request(subject, payload, timeout=10)).data)
    assert reply["ok"] is False and reply["error"]["code"] == "invalid", reply
    assert (await request(nc, subjects.query("cluster.summary"), {}))["ok"]


@pytest.mark.parametrize("field, value", [("limit_vram_gib", 1e307), ("gpu_memory_gib", 1.7e308),
                                          ("limit_tflops", 1e300), ("model_memory_gib", 1e308),
                                          ("lease_seconds", 1e300), ("cpu_milli", 10**18),
                                          ("memory_mib", 10**18)])
def test_extreme_numbers_are_refused_at_the_intake_naming_the_field(field, value):
    payload = {"claim_id": "x", "namespace": "a", field: value}
    with pytest.raises(msgspec.ValidationError, match=field):
        decode_claim(msgspec.json.encode(payload))


@pytest.mark.parametrize("fields", [{"limit_vram_gib": 1e307}, {"gpu_memory_gib": 1.7e308, "models": ["H100"]},
                                    {"limit_tflops": 1.7e308}, {"gpu_tflops": 1e308, "models": ["H100"]},
                                    {"model_memory_gib": 1.7e308}])
def test_the_core_does_not_crash_on_extreme_numbers_already_in_the_log(fields):
    ledger = Ledger()
    ledger.append(h100_node("n0"))
    # built without validation, as an event stored before the bounds existed would be
    spec = msgspec.structs.replace(ClaimSpec(claim_id="huge", namespace="a"), **fields)
    ledger.append(ev.ClaimSubmitted(claim=spec), ev.ClaimSubmitted(claim=ClaimSpec(claim_id="fine", namespace="a")))
    decisions = ledger.decide(now=1.0)
    assert ledger.state.claims["fine"].status == "allocated"
    batch = ev.DecisionBatch(decisions=decisions)  # what is stored reads back (no infinite limits)
    assert ev.decode_event(ev.encode_event(batch)) == batch


class _Drained:
    """An intake message as a pull fetch hands it over: payload, sequence, ack and term."""

    def __init__(self, seq: int, payload: dict):
        self.data, self.headers, self.done = json.dumps(payload).encode(), {}, ""
        self.metadata = type("Meta", (), {"sequence": type("Seq", (), {"stream": seq})()})()

    async def ack(self):
        self.done = "ack"

    async def term(self):
        self.done = "term"


async def test_a_message_whose_handling_fails_is_dead_lettered_terminated_and_the_rest_go_through():
    from services.claim.app import ClaimService
    from services.claim.intake import handle_fetched
    from shared.eventlog import InMemoryEventLog

    class Failing(ClaimService):  # a bug that only this claim reaches
        def prepare(self, spec, trace=None, pending=None, **system):
            if spec.claim_id == "boom":
                raise KeyError("a bug")
            return super().prepare(spec, trace, pending, **system)

    log = InMemoryEventLog()
    service = Failing(log, clock=lambda: 5.0)
    follower = asyncio.create_task(service.follower.run())
    try:
        msgs = [_Drained(i, {"claim_id": cid, "namespace": "a"}) for i, cid in enumerate(("ok-1", "boom", "ok-2"), 1)]
        await handle_fetched(service, msgs)
        await handle_fetched(service, [_Drained(2, {"claim_id": "boom", "namespace": "a"})])  # redelivered
        assert [m.done for m in msgs] == ["ack", "term", "ack"]
        stored = [s async for s in log.read()]
        dead = [s.event for s in stored if s.subject.startswith(subjects.DEAD_LETTER)]
        assert [(d.claim_id, d.code) for d in dead] == [("boom", "unprocessable")]
        assert "KeyError" in dead[0].reasons[0].message
        assert {"ok-1", "ok-2"} <= set(service.state.claims) and "boom" not in service.state.claims
    finally:
        follower.cancel()


class _Redelivered(_Drained):
    def __init__(self, seq, payload, delivered):
        super().__init__(seq, payload)
        self.metadata.num_delivered = delivered


async def test_a_message_delivered_too_often_is_dead_lettered_with_why_not_dropped():
    """The service died on it each time (no error to catch): before the server's max_deliver
    would drop it silently, it is dead-lettered with the reason and terminated."""
    from services.claim.app import ClaimService
    from services.claim.intake import GIVE_UP_AT, MAX_DELIVER, handle_fetched
    from shared.eventlog import InMemoryEventLog

    assert GIVE_UP_AT < MAX_DELIVER
    log = InMemoryEventLog()
    service = ClaimService(log, clock=lambda: 5.0)
    follower = asyncio.create_task(service.follower.run())
    try:
        msgs = [_Redelivered(1, {"claim_id": "killer", "namespace": "a"}, GIVE_UP_AT),
                _Redelivered(2, {"claim_id": "unlucky", "namespace": "a"}, GIVE_UP_AT - 1)]
        await handle_fetched(service, msgs)
        assert [m.done for m in msgs] == ["term", "ack"]
        stored = [s async for s in log.read()]
        dead = [s.event for s in stored if s.subject.startswith(subjects.DEAD_LETTER)]
        assert [(d.claim_id, d.code) for d in dead] == [("killer", "undeliverable")]
        assert f"delivered {GIVE_UP_AT} times" in dead[0].reasons[0].message
        on_claim = [s.event for s in stored if s.subject == subjects.claim("killer")]
        assert [e.code for e in on_claim] == ["undeliverable"]  # its sender can look it up
        assert "unlucky" in service.state.claims and "killer" not in service.state.claims
    finally:
        follower.cancel()
