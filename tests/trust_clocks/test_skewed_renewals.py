"""A lease is judged by when the allocator heard its allocation and renewals, on its own clock: a
claim service whose clock is an hour behind neither lets a lease renewed on time expire (it
appended no renewal at all: its throttle compared its clock with the allocator's time of the
allocation), nor does one an hour ahead keep a lease alive an hour after its holder stopped.
Real nats-server, the claim service and the allocator in this process."""

from __future__ import annotations

import asyncio
import time

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from services.claim.app import ClaimService
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes
from tests.trust_clocks.live import allocator_running, decisions
from tests.waiting import until

HOUR = 3600.0
LEASE_S = 3  # renewed every 0.3 s (a tenth of it): a loaded machine may stall a while


async def _allocated(log, allocator, claim_id: str) -> None:
    await log.append(subjects.claim(claim_id), ev.ClaimSubmitted(
        claim=ClaimSpec(claim_id=claim_id, namespace="team-a", gpus=1, lease_seconds=LEASE_S), at=time.time()))
    assert await until(lambda: claim_id in allocator.state.claims
                       and allocator.state.claims[claim_id].status == "allocated")


async def _renewals(log, claim_id: str) -> int:
    return sum([1 async for s in log.read() if isinstance(s.event, ev.LeaseRenewed) and s.event.claim_id == claim_id])


async def _renew_until_stored(service: ClaimService, log, claim_id: str, count: int) -> bool:
    """Renew every tenth of the lease until `count` renewals are stored (or the claim ended)."""
    async def renewed() -> bool:
        claim = service.state.claims.get(claim_id)
        if claim is None or claim.status == "pending":
            return False  # the service has not folded the allocation yet (a loaded machine)
        if not claim.holds_devices:
            return True  # ended: the caller's asserts say so
        await service.renew(claim_id)
        return await _renewals(log, claim_id) >= count

    return await until(renewed, timeout=60, poll_s=LEASE_S / 10)


async def test_renewals_from_a_claim_service_an_hour_behind_keep_the_lease(fresh_client, fresh_nats):
    log = JetStreamEventLog(fresh_client)
    await register_nodes(log, h100_node("n1"))
    service = ClaimService(log, clock=lambda: time.time() - HOUR)
    following = asyncio.ensure_future(service.follower.run())
    try:
        async with allocator_running(log, fresh_nats.url, tick_s=0.1) as allocator:
            await _allocated(log, allocator, "held")
            # renewals stored over 3 leases' length (counted, not timed): many timer passes
            assert await _renew_until_stored(service, log, "held", 3 * 10)
            assert await decisions(log, ev.AllocationExpired) == []
            assert allocator.state.claims["held"].status == "allocated"
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)


async def test_a_claim_service_an_hour_ahead_does_not_keep_a_lease_alive(fresh_client, fresh_nats):
    log = JetStreamEventLog(fresh_client)
    await register_nodes(log, h100_node("n1"))
    service = ClaimService(log, clock=lambda: time.time() + HOUR)
    following = asyncio.ensure_future(service.follower.run())
    try:
        async with allocator_running(log, fresh_nats.url, tick_s=0.1) as allocator:
            await _allocated(log, allocator, "dropped")
            assert await _renew_until_stored(service, log, "dropped", 3)
            # the holder stops renewing: the lease runs out a lease after the last renewal was heard
            assert await until(lambda: decisions(log, ev.AllocationExpired), timeout=30, poll_s=0.1)
            [expired] = await decisions(log, ev.AllocationExpired)
            assert expired.claim_id == "dropped" and "dropped" not in allocator.state.claims
            # both times are recorded: the claim service's, and the allocator's time of hearing it
            assert expired.heard_at > 0 and expired.last_renewed - expired.heard_at > HOUR / 2
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
