"""A simulated fleet's refreezes collect the young generations only, and the oldest generation is
not collected automatically while they run (as the followers: ledger.follower.old_generation_off):
a full pass over every object made since the last refreeze was 6 % of the fleet's CPU at 1,000
claims/s, and grows with the number of nodes (issue 9, target 4)."""

from __future__ import annotations

import asyncio
import gc

from ledger.follower import OLD_GENERATION_OFF, Refreezer


async def test_the_fleet_refreezes_young_objects_only_with_the_oldest_generation_off(monkeypatch):
    from services.node_agent import app

    seen = []
    monkeypatch.setattr(Refreezer, "add", lambda self, n=1: seen.append((self.young_only, gc.get_threshold()[2])))
    before = gc.get_threshold()
    task = asyncio.ensure_future(app.refreeze_forever(every_s=0.01))
    try:
        for _ in range(200):
            if len(seen) >= 2:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert seen[:2] == [(True, OLD_GENERATION_OFF)] * 2
    assert gc.get_threshold() == before  # given back when it stops
