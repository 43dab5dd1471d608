"""The records of live claims an agent process acts on: one consumer for the nodes it hosts.

A machine's agent hosts one node and watches that node's key; a simulated fleet hosts many and
watches all of theirs through one consumer (one filter subject per node), so each record is read
once, by the one process whose node it is.
"""

from __future__ import annotations

import logging

import msgspec
from nats.js.errors import NotFoundError

from schemas import subjects
from schemas.grants import decode_grants
from shared.latest import LatestWatch
from services.node_agent.binder import Binder

log = logging.getLogger("gpuledger.node_agent")


def watch_records(nc, binders: list[Binder]) -> LatestWatch:
    """Offer each binder the records of its node, the current one first: `run()` the watch."""
    by_subject = {subjects.node_grants(binder.node): binder for binder in binders}

    async def on_msg(msg) -> None:
        binder = by_subject.get(msg.subject)
        if binder is None:
            return
        try:
            record = decode_grants(msg.data)
        except msgspec.MsgspecError as err:  # only the allocator writes there: say so, skip it
            log.warning("%s: ignoring an undecodable record of live claims: %s", binder.node, err)
            return
        binder.offer(record)

    # one node: under its fixed name, the one its user may touch (a fleet's may touch any)
    name = subjects.records_watcher(binders[0].node) if len(binders) == 1 else None
    return LatestWatch(nc.jetstream(), subjects.NODE_GRANTS_STREAM, list(by_subject), on_msg, name)


async def another_agent_watching(nc, node: str) -> bool:
    """Whether a live process watches `node`'s record under the one name a node's agent uses (a
    consumer with a subscriber bound to it): another agent for this node. One left by a process
    that died has none (nats-server drops the interest with the connection), and is taken over."""
    try:
        info = await nc.jetstream().consumer_info(subjects.NODE_GRANTS_STREAM, subjects.records_watcher(node))
    except NotFoundError:
        return False
    return bool(getattr(info, "push_bound", False))
