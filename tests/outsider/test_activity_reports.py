"""Activity reports (`gpu.cmd.claim.activity`, a system's `.activity.<system>`) do not grow the log
without end. Found by the session-25 outsider: every report was appended as a `ClaimActivity`,
also for a claim that had ended long before (a renewal of one is refused as `conflict`), and a
workload reporting in a loop appended one event per report to the log, which is never purged and
which every service folds."""

from __future__ import annotations


import nats

from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog
from services.claim.app import ACTIVITY_EVERY_S
from tests.service.helpers import request, running


async def _activities(nc) -> int:
    return len([s async for s in JetStreamEventLog(nc).read() if isinstance(s.event, ev.ClaimActivity)])


async def test_reports_in_a_loop_are_one_event_and_an_ended_claim_has_none(fresh_nats):
    async with running(fresh_nats.url, "claim") as [ctx]:
        now = [1_000.0]  # the service's clock, moved by the test (a busy machine's requests are slow)
        ctx.claims.clock = lambda: now[0]
        nc = await nats.connect(fresh_nats.url)
        claim = {"claim_id": "act-1", "namespace": "team-a", "gpus": 0, "cpu_milli": 1}
        assert (await request(nc, subjects.command("claim.submit"), {"claim": claim}))["ok"]
        now[0] += ACTIVITY_EVERY_S + 0.1  # past it after the submit, which counts as activity
        first = await request(nc, subjects.command("claim.activity"), {"claim_id": "act-1"})
        assert first == {"ok": True, "data": {"claim_id": "act-1"}}
        await request(nc, subjects.query("claim.get"), {"claim_id": "act-1"})  # the first is folded
        for _ in range(50):
            again = await request(nc, subjects.command("claim.activity"), {"claim_id": "act-1"})
            assert again["ok"], again
        assert await _activities(nc) == 1
        assert (await request(nc, subjects.command("claim.release"), {"claim_id": "act-1"}))["ok"]
        ended = await request(nc, subjects.command("claim.activity"), {"claim_id": "act-1"})
        assert ended["ok"] is False and ended["error"]["code"] == "conflict", ended
        assert ended["error"]["field"] == "claim_id" and "is released" in ended["error"]["message"]
        assert await _activities(nc) == 1
        await nc.close()
