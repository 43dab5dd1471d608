"""A claim already in the stream is found even when the claim service's view lags behind it
(published to the intake, or appended by another replica, a moment before the request)."""

from __future__ import annotations

import asyncio

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from shared.commands import DomainError
from shared.eventlog import InMemoryEventLog
from services.claim.app import ClaimService


async def _follow_after_a_while(service: ClaimService) -> None:
    await asyncio.sleep(0.05)  # the request below arrives before the view has folded anything
    await service.follower.run()


@pytest.mark.parametrize("action", ["release", "renew", "activity"])
async def test_a_command_for_a_claim_the_view_has_not_folded_yet_finds_it(action):
    log = InMemoryEventLog()
    service = ClaimService(log)
    await log.append(subjects.claim("lag-1"), ev.ClaimSubmitted(
        claim=ClaimSpec(claim_id="lag-1", namespace="a", gpus=1), at=0.0), msg_id="lag-1")
    follower = asyncio.create_task(_follow_after_a_while(service))
    try:
        if action == "release":
            assert (await service.release("lag-1", "done"))["status"] == "released"
        elif action == "renew":  # found, then refused for what it is: pending, not "no claim"
            with pytest.raises(DomainError, match="only an allocated claim"):
                await service.renew("lag-1")
        else:
            assert (await service.activity("lag-1")) == {"claim_id": "lag-1"}
    finally:
        follower.cancel()


async def test_an_unknown_claim_is_still_not_found():
    log = InMemoryEventLog()
    service = ClaimService(log)
    follower = asyncio.create_task(service.follower.run())
    try:
        with pytest.raises(DomainError, match="no claim 'nope'"):
            await service.release("nope", "done")
    finally:
        follower.cancel()
