"""Lease renewals in a loop do not grow the log without end (session 30): every
`gpu.cmd.claim.renew` was appended as a `LeaseRenewed` (20 renewals by the CLI, 20 events on the
claim's subject), so a client renewing as fast as it could added an event per request to the log,
which is never purged and which every service folds; activity reports were bounded the same way
in session 26. A renewal within a second (or a tenth of the lease) of the last is answered and not
appended: it would move the lease's end by less than that."""

from __future__ import annotations

import time

import nats

from schemas import events as ev
from schemas import subjects
from services.claim.app import RENEW_EVERY_S
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes, request, running


async def _renewals(nc) -> int:
    return len([s async for s in JetStreamEventLog(nc).read() if isinstance(s.event, ev.LeaseRenewed)])


async def test_renewals_in_a_loop_are_one_event_a_second(fresh_nats):
    async with running(fresh_nats.url, "claim", "allocator") as [claims, _]:
        nc = await nats.connect(fresh_nats.url)
        try:
            await register_nodes(JetStreamEventLog(nc), h100_node("renew-node"))
            claim = {"claim_id": "renew-1", "namespace": "team-a", "gpu_milli": 100, "lease_seconds": 600}
            placed = await request(nc, subjects.command("claim.submit"), {"claim": claim, "wait_seconds": 30})
            assert placed["ok"] and placed["data"]["status"] in ("allocated", "bound"), placed
            now = [time.time() + RENEW_EVERY_S + 5]  # the service's clock, moved by the test
            claims.claims.clock = lambda: now[0]
            renew = {"claim_id": "renew-1"}
            for _ in range(30):
                again = await request(nc, subjects.command("claim.renew"), renew)
                assert again["ok"] and again["data"]["status"] in ("allocated", "bound"), again
            assert await _renewals(nc) == 1
            now[0] += RENEW_EVERY_S + 0.1
            assert (await request(nc, subjects.command("claim.renew"), renew))["ok"]
            assert await _renewals(nc) == 2  # a renewal a second later is written
            got = await request(nc, subjects.query("claim.get"), renew)
            assert got["data"]["lease"]["last_renewed"] == now[0]
        finally:
            await nc.close()
