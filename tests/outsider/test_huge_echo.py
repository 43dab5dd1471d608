"""A refusal quotes what it refuses, bounded. Error words echo the value (msgspec's "unknown field
`k...`", "Invalid enum value 'H...'", the claim service's "no claim 'a...'"), and a value may be
nearly a whole NATS message: before session 32 a release, renewal, get or submit request whose
answer quoted a claim id or key of about 1 MB was never answered (the answer was past the max
payload: the asker timed out, told nothing), and an intake claim with such a key or enum value had
no outcome at all (its refusal could not be stored; it was dead-lettered `unprocessable:
MaxPayloadError`, and the claim service logged 2 MB of traceback per message)."""

from __future__ import annotations

import json

from schemas import subjects, systems
from schemas.wording import FIELD_MAX, MESSAGE_MAX
from shared import nats_auth
from tests.contract.test_outcomes import outcome_when
from tests.tenants.conftest import tenants  # noqa: F401 (the fixture)

ANSWER_MAX = 2 * (MESSAGE_MAX + FIELD_MAX) + 200  # an error answer, whatever it was sent


def _near_max(nc, before: bytes, after: bytes) -> bytes:
    return before + b"k" * (nc.max_payload - len(before) - len(after) - 64) + after


async def _answer(nc, subject: str, body: bytes) -> dict:
    reply = await nc.request(subject, body, timeout=15)  # before: nats' TimeoutError, no answer
    assert len(reply.data) < ANSWER_MAX, len(reply.data)
    return json.loads(reply.data)


async def test_a_request_whose_refusal_quotes_a_huge_value_is_answered(tenants):  # noqa: F811
    billing = await tenants.server.connect("system-billing")
    publisher = await tenants.server.connect(nats_auth.PUBLISHER)
    huge_id = _near_max(billing.nc, b'{"claim_id": "', b'"}')
    for verb in ("release", "renew", "activity"):
        answer = await _answer(billing.nc, f"{subjects.command('claim.' + verb)}.billing", huge_id)
        assert not answer["ok"] and answer["error"]["code"] == "not-found", answer
        assert "characters cut]" in answer["error"]["message"], answer
    for query in ("claim.get", "claim.explain", "claim.resolve"):
        answer = await _answer(tenants.ops, subjects.query(query), huge_id)
        assert not answer["ok"] and answer["error"]["code"] == "not-found", answer
    answer = await _answer(tenants.ops, subjects.command("claim.release"), huge_id)
    assert answer["error"]["code"] == "not-found", answer
    big_key = _near_max(publisher.nc, b'{"claim": {"claim_id": "huge-key-r", "namespace": "team-a", "', b'": 1}}')
    answer = await _answer(publisher.nc, subjects.command("claim.submit"), big_key)
    assert answer["error"]["code"] == "invalid", answer
    assert answer["error"]["field"].startswith("claim.kkkk") and len(answer["error"]["field"]) <= FIELD_MAX, answer


async def test_an_intake_claim_quoting_a_huge_value_gets_its_refusal(tenants):  # noqa: F811
    publisher = await tenants.server.connect(nats_auth.PUBLISHER)
    billing = await tenants.server.connect("system-billing")
    js = publisher.nc.jetstream()
    key = _near_max(publisher.nc, b'{"claim_id": "huge-key", "namespace": "team-a", "', b'": 1}')
    enum = _near_max(publisher.nc, b'{"claim_id": "huge-enum", "namespace": "team-a", "models": ["', b'"]}')
    await js.publish(subjects.INTAKE_CLAIMS, key, headers={"Nats-Msg-Id": "huge-key"})
    await js.publish(subjects.INTAKE_CLAIMS, enum, headers={"Nats-Msg-Id": "huge-enum"})
    sys_label = _near_max(billing.nc, b'{"claim_id": "bill-huge", "namespace": "team-a", "labels": {"', b'": "x"}}')
    await billing.nc.jetstream().publish(systems.intake("billing"), sys_label, headers={"Nats-Msg-Id": "bill-huge"})

    def refused(outcome) -> bool:
        return outcome.final

    for claim_id, field, system in (("huge-key", "kkkk", ""), ("huge-enum", "models[0]", ""),
                                    ("bill-huge", "labels", "billing")):
        outcome = await outcome_when(tenants.ops.jetstream(), claim_id, refused, timeout=30, system=system)
        assert outcome.status == "rejected" and outcome.code == "invalid", outcome  # not `unprocessable`
        assert len(outcome.message) <= MESSAGE_MAX, len(outcome.message)
        assert outcome.reasons[0].field.startswith(field) and len(outcome.reasons[0].field) <= FIELD_MAX, outcome
    # and a claim published after them is taken as ever
    await js.publish(subjects.INTAKE_CLAIMS, json.dumps({"claim_id": "after-huge", "namespace": "team-a", "gpus": 1})
                     .encode(), headers={"Nats-Msg-Id": "after-huge"})
    await outcome_when(tenants.ops.jetstream(), "after-huge", lambda o: o.status in ("allocated", "bound"))
