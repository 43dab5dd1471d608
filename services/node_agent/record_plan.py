"""What an agent does with its node's record of live claims (pure): level-triggered, like a
kubelet with its pods. Whatever it runs that the record no longer lists is stopped; whatever the
record lists that it has not bound is bound, unless its devices are missing or still held.

The record is the fold of the log (schemas.grants), so nothing void or ended is ever in it; the
device check below is a second line: two live claims over one device beyond its capacity are
never both bound here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.grants import LiveClaim, NodeGrants

FULL = 1000  # milli-GPU of one device


@dataclass
class Plan:
    stop: list[str] = field(default_factory=list)  # claims that ended: stop their workloads
    bind: list[LiveClaim] = field(default_factory=list)  # live, never bound: bind now
    adopt: list[LiveClaim] = field(default_factory=list)  # live and bound before we knew them
    held: list[tuple[LiveClaim, str]] = field(default_factory=list)  # refused: (claim, device)


def plan(record: NodeGrants, live: dict[str, LiveClaim], bound: set[str]) -> Plan:
    """`live`: the claims the agent acts on now; `bound`: ids whose binding is in the log."""
    out = Plan()
    listed = {claim.claim_id for claim in record.claims}
    out.stop = [claim_id for claim_id in live if claim_id not in listed]
    use = _device_use(live[c] for c in live if c in listed)
    for claim in record.claims:
        if claim.claim_id in live:
            continue
        taken = _overfilled(use, claim)
        if taken:
            out.held.append((claim, taken))
            continue
        _add(use, claim)
        (out.adopt if claim.bound or claim.claim_id in bound else out.bind).append(claim)
    return out


def _device_use(claims) -> dict[str, int]:
    use: dict[str, int] = {}
    for claim in claims:
        _add(use, claim)
    return use


def _add(use: dict[str, int], claim: LiveClaim) -> None:
    for grant in claim.grants:
        use[grant.uuid] = use.get(grant.uuid, 0) + grant.milli


def _overfilled(use: dict[str, int], claim: LiveClaim) -> str:
    """The first device the claim's grants would fill beyond one device's capacity, or ''."""
    for grant in claim.grants:
        if use.get(grant.uuid, 0) + grant.milli > FULL:
            return grant.uuid
    return ""
