"""A comparable summary of a core State (what must agree between live, replay and snapshot).

Used by the property tests and by `bench replay` to check a rebuilt state against the live fold."""

from __future__ import annotations


def digest(state) -> tuple:
    claims = tuple(sorted((c.claim_id, c.status, tuple(g.uuid for g in c.grants), c.node,
                           tuple(r.message for r in c.reasons)) for c in state.claims.values()))
    units = tuple(sorted((u.uuid, u.milli_free, tuple(sorted(u.holders.items())), u.health, u.pool)
                         for u in state.units.values()))
    usage = tuple(sorted((ns, round(u.tflops, 3), u.vram_mib, u.workers, u.gpus)
                         for ns, u in state.usage.items() if u.workers or u.vram_mib or u.tflops))
    nodes = tuple(sorted((n.name, n.cpu_free, n.mem_free, n.lost, n.condition) for n in state.nodes.values()))
    groups = tuple(sorted((len(g), tuple(g.ranks)) for g in state.groups.values()))
    return claims, units, usage, nodes, tuple(sorted(state.pending)), groups


LIVE_STATUSES = ("pending", "allocated", "bound")


def live_digest(state) -> tuple:
    """`digest` over live claims only: what a compact snapshot plus its tail must reproduce."""
    claims, *rest = digest(state)
    live = tuple(c for c in claims if c[1] in LIVE_STATUSES)
    return (live, *rest)


def compact_digest(state) -> tuple:
    """`live_digest` plus the ids of every ended claim: what a state that drops ended claims (the
    allocator's, `keep_ended` off) must share with one that keeps them."""
    ended = set(state.ended)
    ended.update(c.claim_id for c in state.claims.values() if c.status not in LIVE_STATUSES)
    return (*live_digest(state), tuple(sorted(ended)))
