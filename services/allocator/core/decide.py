"""decide(state, ctx) -> decisions: the allocator's one pure decision function.

One pass: expire unrenewed leases, declare silent nodes lost, release allocations nothing runs on,
reject claims pending past the limit, then walk the queue. Each decision is applied to the state through a journal as it is made (so
later claims in the pass see it) and everything is rolled back before returning: the caller folds
the decisions once they are stored.

Queue rule: claims are tried in order of priority (high first), then age (submit order). A claim
that does not fit does not block the ones behind it (backfill), except that once a claim has
waited longer than `starvation_after_s` it holds the node where it would fit soonest: claims of
equal or lower priority may not use that node. So small claims keep flowing and a large claim
still gets its node when that node drains.
"""

from __future__ import annotations

from ledger.holdings import Journal
from ledger.state import State, flush_index
from services.allocator.core.decision_pass import POLICY_VERSION, DecideContext, Pass
from services.allocator.core.queue import nothing_new_for, queue_order, walk_queue
from services.allocator.core.timers import (expire_leases, expire_pending, lose_silent_nodes,
                                             release_unused)

__all__ = ["POLICY_VERSION", "DecideContext", "decide", "decide_kept", "nothing_new_for", "queue_order"]


def decide(state: State, ctx: DecideContext) -> list:
    """Every decision due now, in order; the state is unchanged when this returns."""
    decisions, journal = decide_kept(state, ctx)
    journal.rollback(state)
    return decisions


def decide_kept(state: State, ctx: DecideContext) -> tuple[list, Journal]:
    """`decide`, with the decisions left applied to the state and the journal that undoes them
    returned (the allocator keeps them when its batch is the next event stored: see
    services/allocator/own_batch.py). The capacity epoch and the freed marks are restored either
    way: a tentative free bumped them, the fold will when stored. On an error the state is
    rolled back before it propagates."""
    flush_index(state)  # a state folded in catch-up mode gets its placement index first
    run = Pass(ctx)
    epoch = state.capacity_epoch
    freed = (dict(state.freed_model), dict(state.freed_ns))
    try:
        if ctx.check_timers:
            expire_leases(state, run)
            lose_silent_nodes(state, run)
            release_unused(state, run)
            expire_pending(state, run)
        walk_queue(state, run, epoch)
    except BaseException:
        run.journal.rollback(state)
        raise
    finally:
        state.capacity_epoch = epoch
        state.freed_model, state.freed_ns = freed
    return run.decisions, run.journal
