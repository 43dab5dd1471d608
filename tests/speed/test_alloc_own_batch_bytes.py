"""The allocator knows its own decision batch again by its bytes when the fold reaches it
(own_batch.OwnBatch.settle_stored): kept, it is not decoded again (about 1 ms for 500 decisions,
and as long again to compare field by field); and the state still equals a fresh fold of the log
(real nats-server)."""

import asyncio
import time

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from ledger.digest import compact_digest
from ledger.state import State
from services.allocator.loop import Allocator
from services.allocator.own_batch import OwnBatch
from shared import jetstream
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes
from tests.service.helpers import test_settings as settings_for
from tests.speed.test_own_batch import fresh_fold
from tests.waiting import until


@pytest.fixture
def log(fresh_client, fresh_nats):
    return JetStreamEventLog(fresh_client), fresh_nats.url


def claim(i: int, gpus: int = 1) -> ev.ClaimSubmitted:
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=f"c{i}", namespace=f"ns{i % 3}", gpus=gpus), at=time.time())


async def test_a_kept_batch_is_not_decoded_again(log, monkeypatch):
    """...nor encoded twice: the bytes kept to know it again are the bytes appended."""
    log, url = log
    encoded: list = []
    encode = ev.encode_event

    def encoding(event):
        if isinstance(event, ev.DecisionBatch):
            encoded.append(event)
        return encode(event)

    monkeypatch.setattr(ev, "encode_event", encoding)
    monkeypatch.setattr(jetstream, "encode_event", encoding)
    await register_nodes(log, *(h100_node(f"n{i}") for i in range(4)))
    allocator = Allocator(log, settings_for(url), "alloc-test")
    decoded: list[str] = []
    read = allocator.follower.admission.read

    def reading(seq, subject, data):
        decoded.append(subject)
        return read(seq, subject, data)

    allocator.follower.admission.read = reading
    following = asyncio.ensure_future(allocator.follow(await log.last_seq()))
    deciding = asyncio.ensure_future(allocator.decide_forever())
    try:
        for wave in range(4):
            await log.append(subjects.INTAKE_BATCHES,
                             ev.EventBatch(events=[claim(wave * 5 + i, gpus=1 + i % 2) for i in range(5)]))
            ids = [f"c{wave * 5 + i}" for i in range(5)]
            assert await until(lambda: not allocator.own.holding and all(
                c in allocator.state.claims and allocator.state.claims[c].status == "allocated" for c in ids)), allocator.own.undone_by
        assert allocator.own.kept == allocator.batches_appended >= 4 and allocator.own.undone == 0
        assert subjects.DECISIONS not in decoded
        assert len(encoded) == allocator.batches_appended
        fresh = await fresh_fold(log)
        assert allocator.state.last_decision_seq == fresh.last_decision_seq
        assert compact_digest(allocator.state) == compact_digest(fresh)
    finally:
        for task in (deciding, following):
            task.cancel()
        await asyncio.gather(deciding, following, return_exceptions=True)


def test_other_bytes_are_left_to_the_decoder():
    """Another payload on the decision subject (another allocator's batch, or ours encoded
    otherwise) is not taken for the kept batch: it is decoded and compared (`settle`)."""
    own, state = OwnBatch(), State()
    batch = ev.DecisionBatch(decisions=[], allocator="a", at=1.0)
    own.batch, own.payload = batch, ev.encode_event(batch)
    other = ev.encode_event(ev.DecisionBatch(decisions=[], allocator="b", at=1.0))
    assert own.settle_stored(state, 5, subjects.DECISIONS, other) is None
    assert own.settle_stored(state, 5, "gpu.evt.claim.x", own.payload) is None
    assert own.holding
    assert own.settle_stored(state, 6, subjects.DECISIONS, own.payload) is batch
    assert not own.holding and own.kept == 1 and state.last_decision_seq == 6
