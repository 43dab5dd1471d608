"""Ask the server for the fences the fold cannot tell (services/allocator/claim_fences.py).

A node's fence (`ClaimFences`) is known to this allocator once looked up: the first record that
needs it (a claim allocated there and not bound) leaves the node's unbound claims out and notes
the node, and this looks up the last message over the node's fence subjects
(`gpu.evt.fence.<node>.*`, a get by wildcard subject) and over its ending subject, believed once
the fold has passed them. Two look-ups per node for the allocator's lifetime; every later message
there is heard live.
"""

from __future__ import annotations

import asyncio
import logging

from nats.js.errors import NotFoundError

from schemas import subjects

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
    """Look up every unknown node fence once; the nodes resolved get their records written."""
    fences, nodes = allocator.fences, allocator.state.nodes
    done = []
    for node in list(fences.unknown):
        if node not in nodes:
            fences.unknown.pop(node, None)
            continue
        seq = await _last_over(js, subjects.node_fence(node))
        mark_seq = await _last_over(js, subjects.node_endings(node))
        state = allocator.state
        if fences.resolved(node, seq, mark_seq, state.last_seq, state.last_decision_seq):
            done.append(node)
    if done and allocator.node_records is not None:
        allocator.node_records.mark(done)
        allocator.node_records.flush()
    return len(done)


async def _last_over(js, subject: str) -> int:
    try:
        msg = await js.get_last_msg(subjects.STREAM, subject)
    except NotFoundError:
        return 0
    return msg.seq or 0
