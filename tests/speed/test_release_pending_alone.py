"""A release of a claim the claim service still sees pending goes on the claim's own subject, alone,
like one allocated and not yet bound: the allocator may have allocated it already (the service's
fold behind the decision subject, as under load), and its node agent's binding is fenced on that
subject only, so a release stored in a batch elsewhere could be overtaken by a binding (`bench e2e`
counted 0-512 such `bound_after_end` a 20,000-claim run). Bound claims' releases stay batched
(tests/speed/test_release_batch.py). Real claim service and nats-server, no allocator: the claims
stay pending."""

from __future__ import annotations

import asyncio

import nats

from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes, request, running

RELEASE = subjects.command("claim.release")


async def test_releases_of_pending_claims_go_on_their_own_subjects(fresh_nats):
    async with running(fresh_nats.url, "claim"):
        nc = await nats.connect(fresh_nats.url)
        try:
            log = JetStreamEventLog(nc)
            await register_nodes(log, h100_node("node-a"))
            ids = [f"pa-{i}" for i in range(8)]
            submitted = await asyncio.gather(*(request(nc, subjects.command("claim.submit"), {
                "claim": {"claim_id": claim_id, "namespace": "team-a", "gpus": 1}}) for claim_id in ids))
            assert all(r["ok"] and r["data"]["status"] == "pending" for r in submitted), submitted
            before = await log.last_seq()
            answers = await asyncio.gather(*(request(nc, RELEASE, {"claim_id": c}) for c in ids))
            assert all(r["ok"] and r["data"]["status"] == "released" for r in answers), answers
            stored = [s async for s in log.read(before + 1)]
            releases = [(s.subject, e.claim_id) for s in stored for e in ev.flatten(s.event)
                        if isinstance(e, ev.ClaimReleased)]
            assert sorted(claim_id for _subject, claim_id in releases) == sorted(ids)  # each once
            assert all(subject == subjects.claim(claim_id) for subject, claim_id in releases), releases
        finally:
            await nc.close()
