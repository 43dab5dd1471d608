"""A key written twice in one JSON object is refused, naming the key, on the intake and on every
request subject (schemas/strict_json.py): parsers differ on which of the two counts."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.strict_json import DuplicateKeyError, check_no_duplicate_keys
from services.claim.intake import wait_intake_drained
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import running


@pytest.mark.parametrize("text, field", [
    ('{"gpus": 1, "gpus": 2}', "gpus"),
    ('{"labels": {"team": "a", "team": "b"}}', "labels.team"),
    ('{"a": [{"x": 1}, {"y": 1, "y": 2}]}', "a[1].y"),
    ('{"a:b": 1, "a:b": 2}', "a:b"),                       # colons in keys, not only after them
    ('{"w": "\\u003a", "gpus": 1, "gpus": 1}', "gpus"),    # an escaped `:` must not hide a repeat
    ('{"w": "x:y", "gpus" : 1, "gpus"\n:1}', "gpus"),      # spaces before the `:`
])
def test_a_repeated_key_is_named_with_its_path(text, field):
    with pytest.raises(DuplicateKeyError) as raised:
        check_no_duplicate_keys(text.encode())
    assert raised.value.field == field
    assert f"duplicate key `{field.rsplit('.', 1)[-1].split(']')[-1]}`" in str(raised.value)


@pytest.mark.parametrize("text", [
    '{"claim_id": "a:b:c", "workload": "x:y", "labels": {"k:1": "v:2"}}',
    '{"w": "\\u003a\\u003a", "gpus": 1}',
    '[{"a": 1}, {"a": 1}]',            # the same key in two objects is no repeat
    '{"a": {"a": {"a": 1}}}',
    '"just a string: with a colon"',
])
def test_payloads_without_a_repeat_pass(text):
    check_no_duplicate_keys(text.encode())


async def _dead_letters(nc) -> list[ev.ClaimRejected]:
    out = []
    async for stored in JetStreamEventLog(nc).read():
        if stored.subject.startswith(subjects.DEAD_LETTER):
            out.append(stored.event)
    return out


async def test_the_intake_refuses_a_claim_with_a_repeated_key(fresh_nats):
    async with running(fresh_nats.url, "claim"):
        nc = await nats.connect(fresh_nats.url)
        js = nc.jetstream()
        await js.publish(subjects.INTAKE_CLAIMS, b'{"claim_id": "dup-1", "namespace": "team-a", '
                                                 b'"gpus": 1, "gpus": 64}', headers={"Nats-Msg-Id": "dup-1"})
        await js.publish(subjects.INTAKE_CLAIMS, b'{"claim_id": "dup-2", "namespace": "team-a", '
                                                 b'"labels": {"k": "a", "k": "b"}}')
        await js.publish(subjects.INTAKE_CLAIMS, b'{"claim_id": "fine-1", "namespace": "team-a"}')
        await wait_intake_drained(js, timeout=30.0)
        refused = {r.claim_id: r.reasons[0] for r in await _dead_letters(nc)}
        await nc.close()
    assert set(refused) == {"dup-1", "dup-2"}
    assert refused["dup-1"].detail["field"] == "gpus" and "duplicate key `gpus`" in refused["dup-1"].message
    assert refused["dup-2"].detail["field"] == "labels.k" and refused["dup-2"].code == "invalid"


async def _ask(nc, subject: str, body: bytes) -> dict:
    import msgspec

    return msgspec.json.decode((await nc.request(subject, body, timeout=10.0)).data)


async def test_every_kind_of_request_subject_refuses_a_repeated_key(fresh_nats):
    async with running(fresh_nats.url, "claim", "quota"):
        nc = await nats.connect(fresh_nats.url)
        submit, release, quota = await asyncio.gather(
            _ask(nc, subjects.command("claim.submit"),
                 b'{"claim": {"claim_id": "r-1", "namespace": "team-a", "gpus": 1, "gpus": 2}}'),
            _ask(nc, subjects.command("claim.release"), b'{"claim_id": "r-1", "claim_id": "r-2"}'),
            _ask(nc, subjects.command("quota.get"), b'{"namespace": "a", "namespace": "b"}'))
        seed = await _ask(nc, subjects.command("claim.submit"),
                          b'{"claim": {"claimId": "r-3", "namespace": "team-a", "gpuCount": 1, "gpuCount": 1}}')
        await nc.close()
    assert submit["error"]["field"] == "claim.gpus" and not submit["ok"]
    assert release["error"] == {"code": "invalid", "field": "claim_id", "message": release["error"]["message"]}
    assert "duplicate key `claim_id`" in release["error"]["message"]
    assert quota["error"]["field"] == "namespace" and quota["error"]["code"] == "invalid"
    assert seed["error"]["field"] == "claim.gpuCount"
