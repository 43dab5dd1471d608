"""Ask the server for the fences the fold cannot tell (services/allocator/claim_fences.py).

A claim submitted before this allocator went live (folded from its snapshot or during catch-up)
has no fence in `ClaimFences` yet: the first record that needs it leaves it out and notes it, and
this looks up the last message over the claim's subjects (`gpu.evt.*.<token>`, a get by wildcard
subject), believed once the fold has passed it. Only claims allocated across a restart, or a
claim whose id another aggregate shares, cost a lookup: none on the path of a claim submitted
while the allocator is live.
"""

from __future__ import annotations

import asyncio
import logging

from nats.js.errors import NotFoundError

from schemas import subjects
from schemas.events import decode_event

log = logging.getLogger("gpuledger.allocator")
LOOK_EVERY_S = 0.25


async def resolve_fences_forever(js, allocator) -> None:
    while True:
        await asyncio.sleep(LOOK_EVERY_S)
        if allocator.fences.unknown:
            try:
                await resolve_fences(js, allocator)
            except Exception as err:  # NATS trouble: looked up again on the next turn
                log.warning("looking up claim fences failed (%s)", err)


async def resolve_fences(js, allocator) -> int:
    """Look up every unknown fence once; the nodes of those resolved get their records written."""
    fences, claims = allocator.fences, allocator.state.claims
    done = []
    for claim_id in list(fences.unknown):
        if claim_id not in claims:
            fences.unknown.pop(claim_id, None)
            continue
        seq, event = await _last_over(js, claim_id)
        state = allocator.state
        if fences.resolved(claim_id, seq, event, state.last_seq, state.last_decision_seq):
            done.append(claim_id)
    if done and allocator.node_records is not None:
        allocator.node_records.mark(allocator.claim_nodes(done))
        allocator.node_records.flush()
    return len(done)


async def _last_over(js, claim_id: str):
    try:
        msg = await js.get_last_msg(subjects.STREAM, subjects.claim_fence(claim_id))
    except NotFoundError:
        return 0, None
    event = None
    if (msg.subject or "").startswith("gpu.evt.ending."):
        try:
            event = decode_event(msg.data)
        except Exception:  # not a mark the fold would believe either
            event = None
    return msg.seq or 0, event
