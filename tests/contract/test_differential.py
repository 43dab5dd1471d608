"""Differential check of the intake against what another team can know from the contract alone.

A bounded, seeded corpus of raw payloads (tests/contract/hostile_corpus.py: every field at and
past its limits, wrong types, unknown fields, unicode, huge numbers, duplicate keys, deep nesting,
invalid UTF-8, not JSON, oversize) is judged in Node.js by ajv on schemas/json/claim.json plus the
documented rules no schema can hold (UTF-8, one JSON value, no repeated key, no lone surrogate,
under the max payload: tests/contract/js/judge.mjs), and published as it is to a real claim
service on a real nats-server. Every payload judged valid must become a ClaimSubmitted; every
other one must be refused (by the server at publish, or on the dead-letter subject naming the
field). Any disagreement fails, with the payload and both verdicts.
"""

from __future__ import annotations

import base64
import uuid

import nats
import msgspec
import nats.errors
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.export import OUT
from services.claim.intake import wait_intake_drained
from shared.jetstream import JetStreamEventLog
from tests.contract.hostile_corpus import MAX_PAYLOAD, corpus
from tests.contract.node import require_node, run_node
from tests.service.helpers import running

# refusals about the payload as a whole name no field; every other one must
_WHOLE_PAYLOAD = ("malformed JSON", "the payload must be one JSON object")


@pytest.fixture(scope="module")
def samples():
    return corpus(uuid.uuid4().hex[:8])


@pytest.fixture(scope="module")
def judged(samples):
    require_node()
    return run_node("judge.mjs", stdin={"schema": str(OUT / "claim.json"), "max_payload": MAX_PAYLOAD,
                                        "samples": [base64.b64encode(d).decode() for _, d in samples]})


def test_the_corpus_is_bounded_and_has_both_kinds(samples, judged):
    assert 300 <= len(samples) <= 1500
    valid = sum(j["valid"] for j in judged)
    assert valid >= 60 and len(judged) - valid >= 200, valid


async def _publish_all(js, samples, subject: str = subjects.INTAKE_CLAIMS) -> dict[int, str]:
    """Publish every payload as it is; the ones the server itself refuses, with its error."""
    refused_by_server = {}
    for i, (_, data) in enumerate(samples):
        try:
            await js.publish(subject, data, headers={"Nats-Msg-Id": f"diff-{i}-{uuid.uuid4().hex}"})
        except (nats.errors.MaxPayloadError, nats.js.errors.APIError) as err:
            refused_by_server[i] = str(err) or type(err).__name__
    return refused_by_server


async def _intake_verdicts(url: str, samples, subject: str = subjects.INTAKE_CLAIMS,
                           **settings) -> list[tuple[bool | None, str]]:
    """(True: stored as ClaimSubmitted / False: refused / None: neither, what the service said),
    for the payloads published on `subject` to a claim service with `settings`."""
    async with running(url, "claim", **settings):
        nc = await nats.connect(url)
        js = nc.jetstream()
        refused_by_server = await _publish_all(js, samples, subject)
        await wait_intake_drained(js, timeout=120.0)
        accepted, dead = set(), {}
        async for stored in JetStreamEventLog(nc).read():
            for event in ev.flatten(stored.event):
                if isinstance(event, ev.ClaimSubmitted):
                    accepted.add(event.claim.claim_id)
                elif isinstance(event, ev.ClaimRejected) and stored.subject.startswith(subjects.DEAD_LETTER):
                    dead[event.reasons[0].detail["payload"]] = event.reasons[0]
        await nc.close()
    out = []
    for i, (_, data) in enumerate(samples):
        head = data[:1024].decode("utf-8", "replace")
        if i in refused_by_server:
            out.append((False, f"server: {refused_by_server[i]}"))
        elif head in dead:
            reason = dead[head]
            out.append((False, f"{reason.code} [{reason.detail['field']}] {reason.message}"))
        elif any(f'"{claim_id}"' in head for claim_id in _ids_in(head, accepted)):
            out.append((True, "accepted"))
        else:
            out.append((None, "no ClaimSubmitted and no dead letter"))
    return out


def _ids_in(head: str, accepted: set[str]) -> list[str]:
    """The accepted claim ids this payload names (each sample names an id of its own)."""
    start = head.find('"claim_id": "')
    if start < 0:
        start = head.find('"claimId": "')
    if start < 0:
        return []
    rest = head[head.index(': "', start) + 3:]
    claim_id = rest[:rest.find('"')]
    return [claim_id] if claim_id in accepted else []


async def test_the_intake_does_what_the_schema_and_the_rules_say(fresh_nats, samples, judged):
    intake = await _intake_verdicts(fresh_nats.url, samples)
    differ = [(name, data[:160], judge["why"], said)
              for (name, data), judge, (verdict, said) in zip(samples, judged, intake)
              if judge["valid"] is not verdict]
    assert differ == [], f"{len(differ)} disagreements (name, payload, ajv and rules, intake):\n" + \
        "\n".join(map(repr, differ))
    vague = [(name, said) for (name, _), (verdict, said) in zip(samples, intake)
             if verdict is False and (" [] " in said or "[...]]" in said or "[[" in said)
             and not any(w in said for w in _WHOLE_PAYLOAD)]
    assert vague == [], "refusals that name no field (or no key of a map):\n" + "\n".join(map(repr, vague))
    crashed = [(name, said) for (name, _), (_, said) in zip(samples, intake) if said.startswith("unprocessable")]
    assert crashed == [], "hostile payloads the intake failed on instead of refusing:\n" + "\n".join(map(repr, crashed))


def _as_request(data: bytes) -> bytes:
    return b'{"claim": ' + data + b"}"


@pytest.fixture(scope="module")
def judged_requests(samples):
    require_node()
    return run_node("judge.mjs", stdin={"schema": str(OUT / "command.SubmitClaim.json"), "max_payload": MAX_PAYLOAD,
                                        "samples": [base64.b64encode(_as_request(d)).decode() for _, d in samples]})


async def test_the_submit_request_does_what_its_schema_and_the_rules_say(fresh_nats, samples, judged_requests):
    """The same corpus as the `claim` of a gpu.cmd.claim.submit request: its reply must agree."""
    said = []
    async with running(fresh_nats.url, "claim"):
        nc = await nats.connect(fresh_nats.url)
        for _, data in samples:
            try:
                reply = msgspec.json.decode((await nc.request(subjects.command("claim.submit"), _as_request(data),
                                                              timeout=30.0)).data)
            except nats.errors.MaxPayloadError as err:
                said.append((False, f"server: {err}"))
                continue
            error = reply.get("error") or {}
            said.append((reply["ok"], f"{error.get('code')} [{error.get('field')}] {error.get('message')}"))
        await nc.close()
    differ = [(name, data[:160], judge["why"], text)
              for (name, data), judge, (ok, text) in zip(samples, judged_requests, said) if judge["valid"] is not ok]
    assert differ == [], f"{len(differ)} disagreements (name, claim, ajv and rules, reply):\n" + \
        "\n".join(map(repr, differ))
    odd = [(name, text) for (name, _), (ok, text) in zip(samples, said)
           if not ok and not text.startswith(("invalid [", "server:"))]
    assert odd == [], "refusals other than `invalid`:\n" + "\n".join(map(repr, odd))
