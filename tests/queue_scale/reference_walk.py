"""The queue walk as it was before the waiting index (main at c1e53fe, services/allocator/core/
queue.py): every waiting claim visited in queue order, a claim skipped only by its own record of
the epoch it failed at. The index must decide exactly as this does (test_same_decisions.py)."""

from __future__ import annotations

from ledger.state import State
from services.allocator.core.decision_pass import Pass
from services.allocator.core.gangs import gang_members, hold_if_starving, place_gang
from services.allocator.core.queue import forget_ended, nothing_new_for, place_one, queue_order
from services.allocator.core.starvation import hold_node_if_starving


def reference_walk(failed_at: dict | None):
    def walk_queue(state: State, run: Pass, epoch: int) -> None:
        done_gangs: set[tuple[str, str, str]] = set()
        held_gangs: set[tuple[str, str, str]] = set()
        if failed_at is not None and run.ctx.check_timers:
            forget_ended(state, failed_at)
        skip = failed_at is not None and not run.ctx.check_timers
        for claim in queue_order(state):
            if len(run.decisions) >= run.ctx.max_decisions:
                return
            if claim.status != "pending":
                continue
            key = claim.spec.gang_id or claim.claim_id
            if skip and key in failed_at and nothing_new_for(state, claim, failed_at[key]) \
                    and not _joined(state, claim):
                if not claim.spec.gang_id:
                    hold_node_if_starving(state, run, claim)
                elif (claim.spec.namespace, claim.system, claim.spec.gang_id) not in held_gangs:  # (29, 33)
                    held_gangs.add((claim.spec.namespace, claim.system, claim.spec.gang_id))
                    hold_if_starving(state, run, claim.spec.gang_id, claim.spec.namespace, claim)
                continue
            if claim.spec.gang_id:
                if (claim.spec.namespace, claim.system, claim.spec.gang_id) not in done_gangs:
                    done_gangs.add((claim.spec.namespace, claim.system, claim.spec.gang_id))
                    place_gang(state, run, claim.spec.gang_id, claim.spec.namespace, system=claim.system)
            else:
                place_one(state, run, claim)
            if failed_at is not None and claim.status == "pending":
                failed_at[key] = epoch

    return walk_queue


def _joined(state: State, claim) -> bool:
    """(Session 30) a gang with a member never decided (never told why it waits: it arrived since
    the gang last failed) is tried, not passed over: its last member may complete it."""
    if not claim.spec.gang_id:
        return False
    return any(not m.reasons for m in gang_members(state, claim.spec.gang_id, claim.spec.namespace, claim.system))
