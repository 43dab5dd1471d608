"""The schema and the service agree, both ways: every sample is judged by Python's jsonschema, by
ajv (Node) and by a real claim service reading the real intake on a real nats-server. A
schema-valid claim must be accepted (ClaimSubmitted); a schema-invalid one refused (ClaimRejected
naming the field). Any disagreement between the three fails."""

from __future__ import annotations

import json

import jsonschema
import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.export import OUT
from services.claim.intake import wait_intake_drained
from shared.jetstream import JetStreamEventLog
from tests.contract.corpus import HAND_WRITTEN, generated
from tests.contract.node import require_node, run_node
from tests.service.helpers import running

CLAIM_SCHEMA = OUT / "claim.json"


def _samples(unique: str) -> list[tuple[str, str, str]]:
    """(name, msg id, JSON text): each sample with a claim id of its own, unless it is about ids."""
    named = list(HAND_WRITTEN.items()) + [(f"generated {i}", s) for i, s in enumerate(generated(150))]
    out = []
    for i, (name, sample) in enumerate(named):
        claim = {"claim_id": f"s{i}-{unique}", "namespace": "team-a", **sample}
        if "claimId" in sample and sample["claimId"] is None:  # the seed's spelling: its id's name
            claim["claimId"] = claim.pop("claim_id")
        claim = {k: v for k, v in claim.items() if v is not None}
        given_id = claim.get("claim_id", claim.get("claimId"))
        msg_id = given_id if "claim_id" not in sample else f"sample-{i}-{unique}"
        out.append((name, msg_id, json.dumps(claim)))
    return out


def _schema_verdicts(texts: list[str]) -> list[bool]:
    validator = jsonschema.Draft202012Validator(json.loads(CLAIM_SCHEMA.read_text()))
    return [validator.is_valid(json.loads(t)) for t in texts]


async def _service_verdicts(url: str, samples) -> list[bool | None]:
    """True: stored as ClaimSubmitted; False: refused (a ClaimRejected naming a field); None: neither."""
    async with running(url, "claim"):
        nc = await nats.connect(url)
        js = nc.jetstream()
        for _, msg_id, text in samples:
            await js.publish(subjects.INTAKE_CLAIMS, text.encode(), headers={"Nats-Msg-Id": msg_id})
        await wait_intake_drained(js, timeout=60.0)
        accepted, refused = set(), {}
        async for stored in JetStreamEventLog(nc).read():
            for event in ev.flatten(stored.event):
                if isinstance(event, ev.ClaimSubmitted):
                    accepted.add(event.claim.claim_id)
                elif isinstance(event, ev.ClaimRejected) and stored.subject.startswith(subjects.DEAD_LETTER):
                    refused[event.reasons[0].detail["payload"]] = event.reasons[0]
        await nc.close()
    verdicts = []
    for _, msg_id, text in samples:
        claim = json.loads(text)
        claim_id = claim.get("claim_id", claim.get("claimId"))
        if claim_id in accepted:
            verdicts.append(True)
        elif text[:1024] in refused:
            reason = refused[text[:1024]]
            assert reason.message and reason.detail["field"], f"refusal names no field: {reason}"
            verdicts.append(False)
        else:
            verdicts.append(None)
    return verdicts


@pytest.fixture(scope="module")
def unique_suffix():
    import uuid

    return uuid.uuid4().hex[:8]


def test_the_corpus_has_both_kinds(unique_suffix):
    verdicts = _schema_verdicts([t for _, _, t in _samples(unique_suffix)])
    assert verdicts.count(True) >= 30 and verdicts.count(False) >= 30, verdicts.count(True)


def test_python_jsonschema_and_ajv_agree_on_every_sample(unique_suffix):
    require_node()
    samples = _samples(unique_suffix)
    texts = [t for _, _, t in samples]
    python = _schema_verdicts(texts)
    ajv = run_node("validate.mjs", stdin={"schema": str(CLAIM_SCHEMA), "samples": texts})
    differ = [(name, p, a["errors"]) for (name, _, _), p, a in zip(samples, python, ajv) if p != a["valid"]]
    assert differ == []


async def test_the_claim_service_accepts_exactly_the_schema_valid_claims(fresh_nats, unique_suffix):
    samples = _samples(unique_suffix)
    schema = _schema_verdicts([t for _, _, t in samples])
    service = await _service_verdicts(fresh_nats.url, samples)
    differ = [(name, text[:200], s, v) for (name, _, text), s, v in zip(samples, schema, service) if s != v]
    assert differ == [], "schema verdict vs service verdict (None: no outcome found)"
