"""The differential check (tests/contract/test_differential.py) on a publishing system's own
intake subject: every payload of the hostile corpus published to `gpu.intake.claim.<system>` is
refused or accepted exactly as ajv and the documented rules say, refusals name their field, and
every accepted claim is recorded as the system's (nothing accepted is lost)."""

from __future__ import annotations

import nats

from schemas import events as ev
from schemas import systems
from shared.jetstream import JetStreamEventLog
from tests.contract.test_differential import _intake_verdicts, judged, samples  # noqa: F401 (fixtures)

FUZZ = systems.parse_systems("fuzz:*")  # every namespace: the corpus's namespaces vary


async def test_a_system_s_intake_refuses_and_accepts_what_the_contract_says(fresh_nats, samples, judged):  # noqa: F811
    said = await _intake_verdicts(fresh_nats.url, samples, systems.intake("fuzz"), systems=FUZZ)
    differ = [(name, data[:160], judge["why"], text)
              for (name, data), judge, (verdict, text) in zip(samples, judged, said) if judge["valid"] is not verdict]
    assert differ == [], f"{len(differ)} disagreements:\n" + "\n".join(map(repr, differ))
    odd = [(name, text) for (name, _), (verdict, text) in zip(samples, said)
           if verdict is False and text.startswith(("unprocessable", "forbidden"))]
    assert odd == []
    nc = await nats.connect(fresh_nats.url)
    owners = [event.system async for stored in JetStreamEventLog(nc).read()
              for event in ev.flatten(stored.event) if isinstance(event, ev.ClaimSubmitted)]
    await nc.close()
    assert len(owners) == sum(j["valid"] for j in judged) and set(owners) == {"fuzz"}
