"""Hostile bodies on the request subjects of the claim, quota and pool services: each is answered,
refused as `invalid` (never `internal`, never silence), and names its field unless the body as a
whole is what is wrong."""

from __future__ import annotations

import msgspec
import nats
import pytest

from tests.service.helpers import running

SUBJECTS = ["gpu.cmd.claim.submit", "gpu.cmd.claim.release", "gpu.cmd.claim.renew", "gpu.cmd.claim.activity",
            # a publishing system's own (docs/contract.md "One user per system")
            "gpu.cmd.claim.submit.billing", "gpu.cmd.claim.release.billing", "gpu.cmd.claim.renew.billing",
            "gpu.cmd.claim.activity.billing",
            "gpu.qry.claim.get", "gpu.qry.claim.explain", "gpu.qry.claim.list", "gpu.qry.claim.resolve",
            "gpu.cmd.endpoint.create", "gpu.cmd.quota.set", "gpu.cmd.quota.get", "gpu.cmd.pool.create",
            "gpu.qry.pool.get"]
WHOLE = [b"", b"   ", b"[]", b"null", b'"x"', b"{", b'{"a": 1} x', b"\xff\xfe", b"[" * 5000 + b"]" * 5000]
FIELDS = [b'{"claim_id": "a", "claim_id": "b", "namespace": "n", "namespace": "m", "name": "p", "name": "q"}',
          b'{"claim_id": "a", "claim_id": "b"}', b'{"name": "p", "name": "q"}', b'{"namespace": "n", "namespace": "m"}',
          b'{"claim_id": 1e999, "namespace": 1e999, "name": 1e999, "claim": 1e999, "pool": 1e999}',
          b'{"colour": "blue"}',
          b'{"claim_id": {"x": ' + b"[" * 5000 + b"]" * 5000 + b'}}']
_WHOLE_WORDS = ("malformed JSON", "the payload must be one JSON object")


@pytest.fixture(scope="module")
async def answers(nats_url):
    out = []
    async with running(nats_url, "claim", "quota", "pool-controller"):
        nc = await nats.connect(nats_url)
        for subject in SUBJECTS:
            for body in WHOLE + FIELDS:
                reply = msgspec.json.decode((await nc.request(subject, body, timeout=20.0)).data)
                out.append((subject, body[:60], reply))
        await nc.close()
    return out


def test_every_hostile_body_is_refused_as_invalid(answers):
    wrong = [(s, b, r) for s, b, r in answers if r["ok"] or r["error"]["code"] != "invalid"]
    assert wrong == []


def test_every_refusal_names_its_field_unless_the_body_as_a_whole_is_wrong(answers):
    vague = [(s, b, r["error"]) for s, b, r in answers if not r["ok"] and not r["error"].get("field")
             and not r["error"]["message"].startswith(_WHOLE_WORDS)]
    assert vague == []
