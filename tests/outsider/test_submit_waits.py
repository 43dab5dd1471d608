"""A submit request that waits for its claim's outcome (`wait_seconds`, up to 3,600) holds up no
other submit. Found by the session-27 outsider: the claim service answered `gpu.cmd.claim.submit`
one request at a time, waits included, so one publisher's `{"claim": <a claim that stays
pending>, "wait_seconds": 3600}` left every later submit request unanswered for an hour (the
CLI's `claim submit` too: "no answer on gpu.cmd.claim.submit within 10s"); 3,000 of them, for
3,000 hours. Submits are now answered side by side, their appends still one at a time, and at
most `SUBMIT_WAITS` wait at once: a submit asking to wait beyond that is answered at once with the
claim as it is (docs/contract.md, Request/reply)."""

from __future__ import annotations

import asyncio

import nats

from schemas import subjects
from services.claim.app import SUBMIT_WAITS
from tests.service.helpers import request, running

SUBMIT = subjects.command("claim.submit")


def _claim(claim_id: str) -> dict:
    return {"claim_id": claim_id, "namespace": "team-a", "gpus": 0, "cpu_milli": 1}


async def test_waiting_submits_hold_up_no_other_submit(fresh_nats):
    # no allocator runs: every claim stays pending, so every wait lasts its whole wait_seconds
    async with running(fresh_nats.url, "claim"):
        nc = await nats.connect(fresh_nats.url)
        waiting = [asyncio.ensure_future(request(nc, SUBMIT, {"claim": _claim(f"wait-{i}"), "wait_seconds": 3600},
                                                 timeout=3700)) for i in range(SUBMIT_WAITS + 20)]
        try:
            plain = await request(nc, SUBMIT, {"claim": _claim("after")}, timeout=15)
            assert plain["ok"] and plain["data"]["claim_id"] == "after", plain
            # a wait beyond the slots is answered at once, with the claim as it is
            over = await request(nc, SUBMIT, {"claim": _claim("over"), "wait_seconds": 3600}, timeout=15)
            assert over["ok"] and over["data"]["status"] == "pending", over
            done = [w for w in waiting if w.done()]
            assert 20 <= len(done) <= 20 + 1, len(done)  # those past the slots; the rest still wait
            assert all(w.result()["ok"] for w in done)
            # each waiting claim was taken all the same
            got = await request(nc, subjects.query("claim.get"), {"claim_id": f"wait-{SUBMIT_WAITS - 1}"})
            assert got["ok"] and got["data"]["status"] == "pending", got
        finally:
            for w in waiting:
                w.cancel()
            await nc.close()


async def test_a_submit_of_the_same_id_with_other_content_is_still_a_conflict_side_by_side(fresh_nats):
    async with running(fresh_nats.url, "claim"):
        nc = await nats.connect(fresh_nats.url)
        first, second = await asyncio.gather(
            request(nc, SUBMIT, {"claim": _claim("same")}),
            request(nc, SUBMIT, {"claim": _claim("same") | {"cpu_milli": 2}}))
        assert first["ok"], first
        assert second["ok"] is False and second["error"]["code"] == "conflict", second
        a, b = await asyncio.gather(request(nc, SUBMIT, {"claim": _claim("x.1")}),
                                    request(nc, SUBMIT, {"claim": _claim("x_1")}))
        assert a["ok"] and b["ok"] is False and b["error"]["code"] == "conflict", (a, b)
        await nc.close()
