"""A namespace's limit on claims waiting at once (`QuotaTotal.max_waiting`): a claim that cannot be
placed when it is first decided, in a namespace that already has that many claims waiting, is
rejected rather than queued. Claims already waiting stay (lowering the limit queues no fewer of
them); a claim that fits free hardware is placed whatever the limit, since it does not wait.

A gang counts as its members, one waiting claim each (as `claim list` shows them): the members of a
gang that would start waiting (its first members while it is incomplete, the rest when it cannot be
placed) start together or not at all. When the limit leaves too few places for them, every member
of the gang is rejected, those that waited for it to be complete too: a part of a gang is never
placed, so keeping it would only hold places."""

from __future__ import annotations

from collections import Counter

from schemas.types import Reason

from ledger.cohorts import quota_of
from ledger.state import Claim, State
from services.allocator.core.decision_pass import Pass


def over_waiting_limit(state: State, run: Pass, claim: Claim) -> Reason | None:
    """The refusal for a claim about to start waiting past its namespace's limit, else None (and
    the claim is counted as waiting for the rest of the pass)."""
    if claim.reasons or claim.spec.gang_id:  # waits already (or a gang member: decided whole)
        return None
    namespace = claim.spec.namespace
    limit = _limit_of(state, namespace)
    if limit is None:
        return None
    counts = _waiting_counts(state, run)
    waiting = counts[namespace]
    if waiting < limit:
        counts[namespace] = waiting + 1
        return None
    return Reason("quota-waiting-exceeded", f"namespace {namespace} already has {waiting} claims waiting, its quota allows at "
                        f"most {limit} (max_waiting): a claim that cannot be placed now is not queued",
                  waiting, {"namespace": namespace, "limit": str(limit)})


def gang_over_waiting_limit(state: State, run: Pass, gang_id: str, members: list[Claim]) -> Reason | None:
    """The refusal for a gang whose members not yet waiting would take their namespace (a gang is
    one namespace's) past its limit, else None (and they are counted as waiting for the rest of
    the pass)."""
    count = sum(1 for member in members if not member.reasons)
    if not count:
        return None
    namespace = members[0].spec.namespace
    limit = _limit_of(state, namespace)
    if limit is None:
        return None
    counts = _waiting_counts(state, run)
    waiting = counts[namespace]
    if waiting + count > limit:
        return Reason("quota-waiting-exceeded",
                      f"gang {gang_id}: its {count} members not yet waiting would bring namespace {namespace} "
                      f"to {waiting + count} claims waiting (it has {waiting}), its quota allows at most {limit} "
                      f"(max_waiting): a gang that cannot be placed now is not queued, all its members are refused",
                      waiting, {"namespace": namespace, "limit": str(limit), "gang": gang_id, "members": count})
    counts[namespace] = waiting + count
    return None


def _limit_of(state: State, namespace: str) -> int | None:
    """The namespace's max_waiting (None: no quota, or no such limit)."""
    quota = quota_of(state, namespace)
    return quota.total.max_waiting if quota is not None else None


def _waiting_counts(state: State, run: Pass) -> Counter:
    """Claims waiting (pending, told why) by namespace, counted once a pass when a limit needs it."""
    if run.waiting_counts is None:
        claims = state.claims
        run.waiting_counts = Counter(claims[c].spec.namespace for c in state.pending if claims[c].reasons)
    return run.waiting_counts
