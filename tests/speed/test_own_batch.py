"""The allocator applies its own decision batch once (services/allocator/own_batch.py): kept
applied while in flight, not folded again when it comes back next, rolled back when anything that
does not commute with it was stored first. Whatever happened, its state must equal a fresh fold
of the log (real nats-server)."""

import asyncio

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from ledger.digest import compact_digest
from ledger.evolve import drop_ended_claims, evolve
from ledger.state import State
from services.allocator.core.decide import DecideContext, decide, decide_kept
from services.allocator.loop import Allocator
from services.allocator.own_batch import OwnBatch, keepable
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes
from tests.service.helpers import test_settings as settings_for
from tests.waiting import until


@pytest.fixture
def log(fresh_client, fresh_nats):
    return JetStreamEventLog(fresh_client), fresh_nats.url


def claim(i: int, gpus: int = 1) -> ev.ClaimSubmitted:
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=f"c{i}", namespace=f"ns{i % 3}", gpus=gpus))


async def fresh_fold(log) -> State:
    state = drop_ended_claims(State())
    async for stored in log.read(1):
        evolve(state, stored.event, stored.seq)
    drop_ended_claims(state)
    return state


async def test_kept_batches_leave_the_state_equal_to_a_fresh_fold_of_the_log(log):
    log, url = log
    # room for every claim (72 GPUs asked, 80 here): the waves end with nothing pending (with 32,
    # the claims left over were only ended by pending expiry, judged on their submit time 0 = 1970,
    # before session 31 judged it by the allocator's time of hearing the submit: core/heard.py)
    await register_nodes(log, *(h100_node(f"n{i}") for i in range(10)))
    allocator = Allocator(log, settings_for(url), "alloc-test")
    following = asyncio.ensure_future(allocator.follow(await log.last_seq()))
    deciding = asyncio.ensure_future(allocator.decide_forever())
    try:
        # waves of claims, some alone, some in intake batches, releases in between (these do not
        # commute with a batch in flight: the kept one is rolled back and folded in log order)
        for wave in range(6):
            base = wave * 10
            await log.append(subjects.INTAKE_BATCHES,
                             ev.EventBatch(events=[claim(base + i, gpus=1 + i % 2) for i in range(5)]))
            for i in range(5, 10):
                await log.append(subjects.claim(f"c{base + i}"), claim(base + i))
            await asyncio.sleep(0.05)
            if wave:
                await log.append(subjects.claim(f"c{base - 10}"), ev.ClaimReleased(claim_id=f"c{base - 10}"))
        assert await until(lambda: not allocator.state.pending and not allocator.own.holding)
        await asyncio.sleep(0.3)  # a tick: nothing more to decide
        assert allocator.own.kept > 0, "no batch was kept: the own-batch path never ran"
        fresh = await fresh_fold(log)
        assert allocator.state.last_seq == fresh.last_seq
        assert allocator.state.last_decision_seq == fresh.last_decision_seq
        assert compact_digest(allocator.state) == compact_digest(fresh)
        assert any(c.status == "allocated" for c in fresh.claims.values())
    finally:
        for task in (deciding, following):
            task.cancel()
        await asyncio.gather(deciding, following, return_exceptions=True)


def _world(claims: int = 6) -> State:
    state = drop_ended_claims(State())
    seq = 0
    for event in [h100_node("n0"), *(claim(i, gpus=2) for i in range(claims))]:
        seq += 1
        evolve(state, event, seq)
    return state


def test_a_kept_batch_is_the_state_its_fold_makes_and_an_interleaved_event_undoes_it():
    ctx = DecideContext(now=1.0)
    folded, kept = _world(), _world()
    decisions = decide(folded, ctx)
    batch = ev.DecisionBatch(decisions=decisions, allocator="a", based_on_seq=folded.last_seq)
    submitted = claim(99)
    evolve(folded, submitted, 8)  # the log: a claim submitted while the batch was in flight,
    evolve(folded, batch, 9)  # then the batch
    decisions_kept, journal = decide_kept(kept, ctx)
    assert decisions_kept == decisions and keepable(kept, decisions_kept)
    own = OwnBatch()
    own.hold(kept, batch, journal)
    assert own.commutes(kept, submitted) and not own.settle(kept, 8, subjects.claim("c99"), submitted)
    evolve(kept, submitted, 8)  # folded on top of the kept batch
    assert own.settle(kept, 9, subjects.DECISIONS, batch) and not own.holding
    kept.last_seq = 9
    assert compact_digest(kept) == compact_digest(folded) and kept.last_decision_seq == 9

    # a release stored before the batch does not commute: the kept batch is rolled back first
    again, ref = _world(), _world()
    decisions, journal = decide_kept(again, ctx)
    own.hold(again, ev.DecisionBatch(decisions=decisions, allocator="a"), journal)
    released = ev.ClaimReleased(claim_id="c0")
    assert not own.settle(again, 8, subjects.claim("c0"), released) and not own.holding
    assert compact_digest(again) == compact_digest(ref)


def _two_nodes_half_full() -> State:
    """n0 and n1; c0-c3 allocated and folded, c4-c7 pending (every claim 2 GPUs, 3 namespaces)."""
    state = drop_ended_claims(State())
    for seq, event in enumerate([h100_node("n0"), h100_node("n1"), *(claim(i, gpus=2) for i in range(4))], 1):
        evolve(state, event, seq)
    first = decide(state, DecideContext(now=1.0))
    evolve(state, ev.DecisionBatch(decisions=first, allocator="a"), 7)
    for seq, i in enumerate(range(4, 8), 8):
        evolve(state, claim(i, gpus=2), seq)
    return state


def test_a_release_of_another_claim_stored_before_the_batch_is_folded_on_top_and_comes_out_the_same():
    ctx = DecideContext(now=2.0)
    folded, kept = _two_nodes_half_full(), _two_nodes_half_full()
    decisions = decide(folded, ctx)
    batch = ev.DecisionBatch(decisions=decisions, allocator="a")
    assert {d.claim_id for d in decisions if isinstance(d, ev.ClaimAllocated)} == {"c4", "c5", "c6", "c7"}
    released = ev.EventBatch(events=[ev.ClaimReleased(claim_id="c0"), ev.ClaimReleased(claim_id="c2")])
    evolve(folded, released, 12)  # the log: two releases, then the batch
    evolve(folded, batch, 13)
    decisions_kept, journal = decide_kept(kept, ctx)
    own = OwnBatch()
    own.hold(kept, batch, journal)
    assert not own.settle(kept, 12, subjects.INTAKE_BATCHES, released) and own.holding
    evolve(kept, released, 12)  # folded on top of the kept batch
    assert own.settle(kept, 13, subjects.DECISIONS, batch)
    kept.last_seq = 13
    assert compact_digest(kept) == compact_digest(folded)
    assert [(ns, u.tflops, u.limit_tflops) for ns, u in sorted(kept.usage.items())] == \
        [(ns, u.tflops, u.limit_tflops) for ns, u in sorted(folded.usage.items())]
    assert kept.capacity_epoch == folded.capacity_epoch and kept.freed_ns == folded.freed_ns


def test_a_namespace_s_tflops_add_up_the_same_in_any_order():
    from ledger.holdings import _charge
    from ledger.state import Claim, milli_tflops

    def charged(order):
        state = State()
        for tflops in order:
            c = Claim(ClaimSpec(claim_id=f"t{tflops}", namespace="ns"), 1, 0.0)
            c.tflops = c.limit_tflops = tflops  # as the fold of an allocation sets them
            c.tflops_m = c.limit_tflops_m = milli_tflops(tflops)
            _charge(state, c, +1)
        return state.usage_of("ns").tflops, state.usage_of("ns").limit_tflops

    assert charged([0.1, 0.2, 0.3]) == charged([0.3, 0.2, 0.1]) == (0.6, 0.6)


def test_drift_and_alerts_stored_before_the_batch_keep_it_unless_they_name_one_of_its_claims():
    """Under load the quota service's drift reports came between a third of the batches and their
    fold: one about another claim, or an event the fold ignores, commutes with the batch."""
    ctx = DecideContext(now=2.0)
    folded, kept = _two_nodes_half_full(), _two_nodes_half_full()
    decisions = decide(folded, ctx)
    batch = ev.DecisionBatch(decisions=decisions, allocator="a")
    between = [
        ev.DriftDetected(node="n0", kind="idle-allocation", claim_id="c0", at=1.5),
        ev.DriftCleared(node="n0", kind="idle-allocation", claim_id="c1"),
        ev.QuotaAlertRaised(namespace="ns0", resource="gpus", used_percent=90.0, threshold_percent=80.0),
        ev.QuotaAlertCleared(namespace="ns1", resource="gpus", used_percent=10.0, threshold_percent=80.0),
    ]
    for seq, event in enumerate(between, 12):
        evolve(folded, event, seq)
    evolve(folded, batch, 16)
    decisions_kept, journal = decide_kept(kept, ctx)
    own = OwnBatch()
    own.hold(kept, batch, journal)
    for seq, event in enumerate(between, 12):
        assert not own.settle(kept, seq, subjects.drift("n0"), event) and own.holding, event
        evolve(kept, event, seq)
    assert own.settle(kept, 16, subjects.DECISIONS, batch) and own.kept == 1 and own.undone == 0
    kept.last_seq = 16
    assert compact_digest(kept) == compact_digest(folded)
    assert kept.claims["c0"].trail == folded.claims["c0"].trail

    # a drift report about a claim the batch decides on does not commute: rolled back first
    again, ref = _two_nodes_half_full(), _two_nodes_half_full()
    decisions, journal = decide_kept(again, ctx)
    own.hold(again, ev.DecisionBatch(decisions=decisions, allocator="a"), journal)
    about_c4 = ev.DriftDetected(node="n1", kind="idle-allocation", claim_id="c4", at=1.5)
    assert not own.settle(again, 12, subjects.drift("n1"), about_c4) and not own.holding
    assert compact_digest(again) == compact_digest(ref)


def test_a_kept_batch_undone_after_releases_were_folded_on_top_keeps_those_releases():
    """Releases of other claims commute with the kept batch and are folded on top of it; when a
    later event does not commute, undoing the batch must take back only what the batch did. A
    rollback that restored the units, nodes and namespace use as they were before the batch gave
    the released claims back their devices: units held by claims the state no longer had, and
    every later pass failed on them (found by `bench e2e --claims 20000`: KeyError in
    release_unused and in the fold of usage reports, decisions stalled)."""
    ctx = DecideContext(now=2.0)
    folded, kept = _two_nodes_half_full(), _two_nodes_half_full()
    decisions = decide(folded, ctx)
    batch = ev.DecisionBatch(decisions=decisions, allocator="a")
    released = ev.EventBatch(events=[ev.ClaimReleased(claim_id="c0"), ev.ClaimReleased(claim_id="c2")])
    about_c4 = ev.DriftDetected(node="n1", kind="idle-allocation", claim_id="c4", at=1.5)
    for seq, event in ((12, released), (13, about_c4), (14, batch)):  # the log, in its order
        evolve(folded, event, seq)

    decisions_kept, journal = decide_kept(kept, ctx)
    own = OwnBatch()
    own.hold(kept, batch, journal)
    assert not own.settle(kept, 12, subjects.INTAKE_BATCHES, released) and own.holding
    evolve(kept, released, 12)  # folded on top of the kept batch
    assert not own.settle(kept, 13, subjects.drift("n1"), about_c4) and not own.holding  # undone
    assert own.undone_by == {"DriftDetected": 1}  # why, for `allocator.status` and `bench e2e`
    evolve(kept, about_c4, 13)
    for unit in kept.units.values():
        assert set(unit.holders) <= set(kept.claims), f"{unit.uuid} held by a claim that ended"
    for node in kept.nodes.values():
        assert set(node.claims) <= set(kept.claims), f"{node.name} lists a claim that ended"
    assert not own.settle(kept, 14, subjects.DECISIONS, batch)
    evolve(kept, batch, 14)  # folded as any event, now that it is not kept
    assert compact_digest(kept) == compact_digest(folded)
    assert [(ns, u.tflops, u.vram_mib, u.gpus, u.workers) for ns, u in sorted(kept.usage.items())] == \
        [(ns, u.tflops, u.vram_mib, u.gpus, u.workers) for ns, u in sorted(folded.usage.items())]
    assert [(n.name, n.cpu_free, n.mem_free) for n in kept.nodes.values()] == \
        [(n.name, n.cpu_free, n.mem_free) for n in folded.nodes.values()]


def test_a_usage_report_that_fails_to_fold_on_top_undoes_the_batch_and_is_left_to_the_fold():
    """The fold's hook must never raise into the follower: a report it cannot fold on top of the
    kept batch (a holder the state lacks) undoes the batch and goes to the fold, which logs it."""
    from schemas.types import DeviceUsage

    kept = _two_nodes_half_full()
    decisions, journal = decide_kept(kept, DecideContext(now=2.0))
    own = OwnBatch()
    own.hold(kept, ev.DecisionBatch(decisions=decisions, allocator="a"), journal)
    held = next(d for d in decisions if isinstance(d, ev.ClaimAllocated))
    unit = kept.units[held.grants[0].uuid]
    unit.holders["ghost"] = 0  # damage no fold makes
    busy = ev.UsageObserved(node=held.node, devices=[DeviceUsage(uuid=unit.uuid, utilization_percent=90)], at=3.0)
    assert not own.settle(kept, 20, subjects.node(held.node), busy) and not own.holding
    assert own.undone_by == {"usage report failed to fold": 1}
