"""Releases wait a moment for one another (shared.commands.batched_command's `linger_s`; the claim
service's RELEASE_LINGER_S): at moderate rates a release came alone, one ledger message read by
every follower per claim; releases that come within the linger are appended together."""

from __future__ import annotations

import asyncio

import msgspec
import nats

from schemas import commands as cmd
from services.claim import app as claim_app
from shared.commands import batched_command

GUARD_S = 300.0  # for hangs only
SPACING_S = 0.1


async def _batches_of_two_spaced_requests(nc, linger_s: float) -> list[list[str]]:
    """Two releases, the second sent SPACING_S after the first (long after the first reached the
    service, well within the linger)."""
    seen: list[list[str]] = []

    async def handle_many(commands):
        seen.append([c.claim_id for c in commands])
        return [cmd.ok({"claim_id": c.claim_id}) for c in commands]

    tasks: list[asyncio.Future] = []
    sub = await batched_command(nc, "linger.release", cmd.ReleaseClaim, handle_many,
                                lambda coro, _name: tasks.append(asyncio.ensure_future(coro)), linger_s=linger_s)
    client = await nats.connect(nc.connected_url.geturl())
    try:
        requests = []
        for claim_id in ("r-1", "r-2"):
            requests.append(asyncio.ensure_future(client.request(
                "linger.release", msgspec.json.encode({"claim_id": claim_id}), timeout=GUARD_S)))
            await client.flush()
            await asyncio.sleep(SPACING_S)
        replies = await asyncio.wait_for(asyncio.gather(*requests), GUARD_S)
        assert [msgspec.json.decode(r.data)["data"]["claim_id"] for r in replies] == ["r-1", "r-2"]
        return seen
    finally:
        await client.close()
        for task in tasks:
            task.cancel()
        await sub.unsubscribe()


async def test_a_release_that_comes_within_the_linger_joins_the_one_before(fresh_client):
    assert await _batches_of_two_spaced_requests(fresh_client, linger_s=20 * SPACING_S) == [["r-1", "r-2"]]


def test_the_claim_service_lingers_on_its_releases():
    assert 0 < claim_app.RELEASE_LINGER_S <= 0.05  # a release is answered a few ms later at most
