"""No node record is built from decisions not yet stored (services/allocator/node_writer.py
`paused`): while the allocator's own batch is in flight its decisions are kept applied in the fold
(own_batch.py), and a record written then could list an allocation the log never holds (the
batch fenced out) or one a release stored just before the batch voids: a pending claim's release
is conditioned on the decision subject, not on the node's fence (services/claim/app.py), so only
a record from the stored batch on may list the claim. On a real nats-server."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import Grant
from tests.service.helpers import running


async def test_records_wait_while_a_batch_is_held_and_are_written_after(fresh_nats):
    async with running(fresh_nats.url, "allocator") as [ctx]:
        allocator, writer = ctx.allocator, ctx.allocator.node_records
        await allocator.caught_up.wait()
        assert not writer.paused()
        allocator.own.batch = ev.DecisionBatch(decisions=[ev.ClaimAllocated(
            claim_id="c", namespace="ns", node="n0", grants=[Grant(node="n0", uuid="GPU-0", index=0)])])
        assert writer.paused()  # what the allocator holds in flight
        writes = writer.writes
        writer.mark(["n0"])
        await writer._write_dirty()
        assert writer.writes == writes and "n0" in writer.dirty
        allocator.own.batch = None
        await writer._write_dirty()
        assert writer.writes == writes + 1 and "n0" not in writer.dirty
