"""Priority is the publisher's word, so it counts only within the claim's namespace (Kueue-style).

A claim's `priority` orders it among its own namespace's claims, lets it preempt its own
namespace's lower-priority allocations, and lets it use a node held for a starving claim of its
own namespace with lower priority. Across namespaces priority decides nothing: the queue interleaves
namespaces by fair share and age (each namespace's claims take its own places in submit order, in
its priority order: `queue_slots`), a node held for another namespace's starving claim stays held,
and another namespace's allocations are evicted only by the rules that exist for that (stale,
quota reclaim of borrowed capacity), unless an admin lets the namespace preempt across
namespaces: `QuotaSpec.preempt_other_namespaces` (its own quota, its cohort's or the default).
Before session 30 a claim of priority 1000 from any namespace evicted other namespaces' claims."""

from __future__ import annotations

from ledger.cohorts import quota_of
from ledger.state import State


def crosses_namespaces(state: State, namespace: str) -> bool:
    """Whether an admin lets this namespace's priorities count against other namespaces."""
    quota = quota_of(state, namespace)
    return quota is not None and quota.preempt_other_namespaces


def held_against(held: dict, priority: int, namespace: str, crosses: bool) -> set[str]:
    """Nodes held for starving claims that a claim of this priority and namespace may not use:
    held by a claim of equal or higher priority, or of another namespace (unless `crosses`)."""
    return {node for node, (prio, owner) in held.items()
            if prio >= priority or (owner != namespace and not crosses)}


def queue_slots(entries: list[tuple[str, int, int, object]]) -> dict[object, int]:
    """Each waiting claim's place in the queue, given (namespace, priority, age, claim) with unique
    ages: a namespace whose claims have different priorities hands its claims' ages out in its
    priority order (high first, then age), so a high priority moves a claim ahead of its own
    namespace's claims only, never ahead of another namespace's. Only claims of such namespaces
    are in the answer: any other claim's place is its age."""
    by_ns: dict[str, list[tuple[int, int, object]]] = {}
    priorities: dict[str, set[int]] = {}
    for namespace, priority, age, item in entries:
        by_ns.setdefault(namespace, []).append((priority, age, item))
        priorities.setdefault(namespace, set()).add(priority)
    slots: dict[object, int] = {}
    for namespace, members in by_ns.items():
        if len(priorities[namespace]) < 2:
            continue
        ages = sorted(age for _, age, _ in members)
        ranked = sorted(members, key=lambda m: (-m[0], m[1]))
        for age, (_, _, item) in zip(ages, ranked):
            slots[item] = age
    return slots
