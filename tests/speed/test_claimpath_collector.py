"""The claim service's fold leaves the collector's oldest generation alone once caught up (as the
quota service, pool-controller and projector do: tests/speed/test_followers_collector.py): in
`bench e2e --claims 20000` CPython's automatic full passes over every claim folded since the last
freeze were 9 % of the claim service's CPU. Young objects are still collected, and a full pass
runs every `unfreeze_every` refreezes. Real claim service and nats-server."""

from __future__ import annotations

import gc
import json

import nats

from schemas import subjects
from ledger.follower import OLD_GENERATION_OFF
from services.claim.app import ClaimService
from services.claim.intake import wait_intake_drained
from tests.service.helpers import running
from tests.speed.test_followers_collector import generations  # noqa: F401 (a fixture)


def test_the_claim_service_follows_without_old_collections():
    service = ClaimService(None)
    assert service.follower.collect_old is False
    assert service.follower.refreezer.young_only


async def test_the_claim_service_takes_claims_in_without_a_full_pass(fresh_nats, generations):  # noqa: F811
    async with running(fresh_nats.url, "claim") as contexts:
        service = contexts[0].claims
        nc = await nats.connect(fresh_nats.url)
        js = nc.jetstream()
        thresholds: list[int] = []
        service.follower.listeners.append(lambda *_: thresholds.append(gc.get_threshold()[2]))
        before = gc.get_threshold()
        gc.set_threshold(50, 2, before[2])  # small: a full pass within a few hundred objects, were it allowed
        try:
            start = len(generations)
            for i in range(300):
                await js.publish(subjects.INTAKE_CLAIMS, json.dumps(
                    {"claim_id": f"gc-{i}", "namespace": "team-a", "labels": {"k": str(i)}}).encode())
            await wait_intake_drained(js, timeout=30)
            assert all(f"gc-{i}" in service.state.claims for i in range(300))
            assert thresholds and set(thresholds) == {OLD_GENERATION_OFF}
            assert len(generations) > start  # young collections went on
            assert 2 not in generations[start:], "a full pass while taking claims in"
        finally:
            gc.set_threshold(*before[:2], gc.get_threshold()[2])
            await nc.close()
