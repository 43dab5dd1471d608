"""Pending outcomes go out at most `pending_per_s` a second (services/claim/outcomes.py): past the
budget the claims held longest are written first, and a claim allocated before its turn is written
`allocated` only, never `pending`. Every state a publisher waits for (allocated, bound, final) still
comes at once, and the checkpoint stays below a claim whose pending outcome waits, so a restart
writes it. Real claim service and nats-server; the writer's clock is the test's."""

from __future__ import annotations

import asyncio

import nats

from schemas import events as ev
from schemas import subjects
from schemas.outcomes import decode_outcome
from schemas.types import Reason
from shared.jetstream import JetStreamEventLog
from tests.quota.builders import claim, node
from tests.service.helpers import running
from tests.speed.test_outcome_coalesce import _drained
from tests.waiting import until
from tests.speed.test_outcome_pending_held import _allocation

HOLD_S = 3600.0  # of the test's clock, which moves only when the test moves it
BUDGET = 3  # pending outcomes a second of that clock
CLAIMS = [f"pb-{i}" for i in range(8)]


async def _outcomes_seen(url: str):
    """A publisher's view: every outcome written, decoded, in the order it came."""
    nc = await nats.connect(url)
    seen: list = []

    async def note(msg) -> None:
        seen.append(decode_outcome(msg.data))

    await nc.subscribe("gpu.outcome.claim.>", cb=note)
    return nc, seen


async def test_pending_outcomes_past_the_budget_wait_their_turn_and_allocations_do_not(fresh_nats):
    async with running(fresh_nats.url, "claim") as contexts:
        writer, service = contexts[0].claim_outcomes, contexts[0].claims
        now = [0.0]
        writer.pending_after_s, writer.clock, writer.pending_per_s = HOLD_S, lambda: now[0], BUDGET
        writer.pending_room = BUDGET  # a second's worth (the test's clock set back adds nothing)
        nc, seen = await _outcomes_seen(fresh_nats.url)
        log = JetStreamEventLog(nc)
        await log.append(subjects.node("n1"), node("n1", 2))
        for claim_id in CLAIMS:
            await log.append(subjects.claim(claim_id), claim(claim_id, at=1.0))
        why = [Reason("no-room", "no node has 1 free GPU", count=1)]
        waiting = await log.append(subjects.DECISIONS, ev.DecisionBatch(
            decisions=[ev.ClaimPending(claim_id=c, reasons=why, at=2.0) for c in CLAIMS], at=2.0))
        await service.follower.wait_for_seq(waiting.seq)
        assert await until(lambda: len(writer.held) == len(CLAIMS) and not writer.dirty)
        assert seen == []
        order = list(writer.held)  # the order they were found waiting: the order of their turns
        allocated_first = order[-1]

        now[0] += HOLD_S  # every hold has passed: only the budget's worth goes out
        writer.wake.set()
        assert await until(lambda: len(seen) == BUDGET)
        await asyncio.sleep(0.3)  # flushes go on (20 ms apart): nothing more while the clock stands
        assert [o.claim_id for o in seen] == order[:BUDGET]
        assert all(o.status == "pending" and o.reasons for o in seen)
        assert list(writer.held) == order[BUDGET:]
        assert writer.safe_checkpoint() < waiting.seq  # a restart writes the ones still held

        # a claim allocated while it waits its turn: written allocated at once, never pending
        allocated = await log.append(subjects.DECISIONS, _allocation(allocated_first, at=3.0))
        await service.follower.wait_for_seq(allocated.seq)
        assert await until(lambda: seen[-1].claim_id == allocated_first)
        assert seen[-1].status == "allocated" and allocated_first not in writer.held

        now[0] += 1.0  # a second later: the next ones, held longest first
        writer.wake.set()
        assert await until(lambda: len(seen) == 2 * BUDGET + 1)
        assert [o.claim_id for o in seen[BUDGET + 1:]] == order[BUDGET:2 * BUDGET]
        now[0] += 1.0
        writer.wake.set()
        assert await until(lambda: not writer.held)
        assert await until(lambda: _drained(writer, allocated.seq))
        pending = [o.claim_id for o in seen if o.status == "pending"]
        assert pending == order[:-1]  # each once, in turn; the allocated one never
        writer._collect()
        assert writer.safe_checkpoint() >= allocated.seq
        await nc.close()


async def test_below_the_budget_every_pending_outcome_goes_out_when_due(fresh_nats):
    async with running(fresh_nats.url, "claim") as contexts:
        writer, service = contexts[0].claim_outcomes, contexts[0].claims
        now = [0.0]
        writer.pending_after_s, writer.clock = HOLD_S, lambda: now[0]
        assert writer.pending_per_s >= len(CLAIMS)  # the service's own budget
        nc, seen = await _outcomes_seen(fresh_nats.url)
        log = JetStreamEventLog(nc)
        for claim_id in CLAIMS:
            await log.append(subjects.claim(claim_id), claim(claim_id, at=1.0))
        why = [Reason("no-room", "no node has 1 free GPU", count=1)]
        waiting = await log.append(subjects.DECISIONS, ev.DecisionBatch(
            decisions=[ev.ClaimPending(claim_id=c, reasons=why, at=2.0) for c in CLAIMS], at=2.0))
        await service.follower.wait_for_seq(waiting.seq)
        assert await until(lambda: len(writer.held) == len(CLAIMS))
        now[0] += HOLD_S
        writer.wake.set()
        assert await until(lambda: len(seen) == len(CLAIMS))
        assert sorted(o.claim_id for o in seen) == sorted(CLAIMS) and not writer.held
        await nc.close()


async def test_over_the_budget_the_earliest_due_goes_first_explained_or_not(fresh_nats):
    """A claim the allocator never explained is due by its own (later) hold; past the budget it
    takes its turn by that time among the explained ones, not after all of them."""
    async with running(fresh_nats.url, "claim") as contexts:
        writer, service = contexts[0].claim_outcomes, contexts[0].claims
        now = [0.0]
        writer.pending_after_s, writer.clock, writer.pending_per_s = HOLD_S, lambda: now[0], 1
        writer.pending_room = 1
        nc, seen = await _outcomes_seen(fresh_nats.url)
        log = JetStreamEventLog(nc)
        first = await log.append(subjects.claim("pb-old"), claim("pb-old", at=1.0))  # never explained
        await service.follower.wait_for_seq(first.seq)
        assert await until(lambda: "pb-old" in writer.unexplained)
        now[0] += HOLD_S / 4  # the others come later: due later
        for claim_id in ("pb-a", "pb-b"):
            await log.append(subjects.claim(claim_id), claim(claim_id, at=1.0))
        why = [Reason("no-room", "no node has 1 free GPU", count=1)]
        waiting = await log.append(subjects.DECISIONS, ev.DecisionBatch(
            decisions=[ev.ClaimPending(claim_id=c, reasons=why, at=2.0) for c in ("pb-a", "pb-b")], at=2.0))
        await service.follower.wait_for_seq(waiting.seq)
        assert await until(lambda: set(writer.held) == {"pb-a", "pb-b"} and not writer.dirty)
        assert writer.unexplained["pb-old"] < min(writer.held.values())
        now[0] += 2 * HOLD_S  # every hold has passed; the budget lets one out a second
        writer.wake.set()
        assert await until(lambda: len(seen) == 1)
        await asyncio.sleep(0.2)
        assert [(o.claim_id, o.status, o.reasons) for o in seen] == [("pb-old", "pending", [])]
        for _second in range(2):
            now[0] += 1.0
            writer.wake.set()
            assert await until(lambda: len(seen) == 2 + _second)
        assert sorted(o.claim_id for o in seen[1:]) == ["pb-a", "pb-b"]
        await nc.close()
