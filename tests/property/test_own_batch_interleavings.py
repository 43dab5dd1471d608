"""The allocator's own batch under any interleaving (services/allocator/own_batch.py).

The allocator keeps its decisions applied while their batch is in flight, folds events that
commute with it on top, and undoes it when one does not. Whatever the log's order of its batches
and other writers' events (submits, releases, drift reports, usage reports, heartbeats), the
state it lives on must equal a fresh fold of the log whenever no batch is in flight. A journal
rollback that restored what the batch had saved undid releases folded on top of it (stale device
holders, decisions stalled under `bench e2e --claims 20000`): this is the class of bug it checks."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec, DeviceUsage
from ledger.digest import compact_digest
from ledger.evolve import drop_ended_claims, evolve
from ledger.state import State
from services.allocator.core.decide import DecideContext, decide_kept
from services.allocator.own_batch import OwnBatch
from tests.service.helpers import h100_node

SHAPES = [(1, 1000), (2, 1000), (1, 500), (1, 250), (4, 1000)]  # (gpus, milli per GPU)
SUBMIT = st.tuples(st.just("submit"), st.integers(0, len(SHAPES) - 1), st.integers(0, 2))
RELEASE = st.tuples(st.just("release"), st.integers(0, 10_000))
# weighted toward what makes interleavings: claims, passes, batches landing, releases between
STEP = st.one_of(
    SUBMIT, SUBMIT, RELEASE, RELEASE,
    st.tuples(st.just("decide")), st.tuples(st.just("decide")),
    st.tuples(st.just("batch")), st.tuples(st.just("batch")),
    st.tuples(st.just("drift"), st.integers(0, 10_000)),
    st.tuples(st.just("usage"), st.integers(0, 1), st.booleans()),
    st.tuples(st.just("beat"), st.integers(0, 1)),
)


class World:
    """The log, its fresh fold, and the allocator's live state with its kept batch."""

    def __init__(self) -> None:
        self.fresh, self.live, self.own = drop_ended_claims(State()), drop_ended_claims(State()), OwnBatch()
        self.seq, self.now, self.claims, self.in_flight = 0, 1.0, 0, None
        for node in (h100_node("n0", gpus=4), h100_node("n1", gpus=4)):
            self.store(subjects.node("n0" if node.node == "n0" else "n1"), node)

    def store(self, subject: str, event) -> None:
        """Append to the log: the fresh fold folds it; the live state as the allocator does."""
        self.seq += 1
        evolve(self.fresh, event, self.seq)
        if not self.own.settle(self.live, self.seq, subject, event):
            evolve(self.live, event, self.seq)
        self.live.last_seq = self.seq

    def live_claim(self, pick: int) -> str | None:
        live = sorted(c for c, claim in self.fresh.claims.items() if claim.status in ("allocated", "bound"))
        return live[pick % len(live)] if live else None

    def step(self, kind, *args) -> None:
        self.now += 0.5
        if kind == "submit":
            gpus, milli = SHAPES[args[0]]
            self.claims += 1
            cid = f"c{self.claims}"
            spec = ClaimSpec(claim_id=cid, namespace=f"ns{args[1]}", gpus=gpus, gpu_milli=milli)
            self.store(subjects.claim(cid), ev.ClaimSubmitted(claim=spec, at=self.now))
        elif kind == "release" and (cid := self.live_claim(args[0])):
            self.store(subjects.claim(cid), ev.ClaimReleased(claim_id=cid, at=self.now))
        elif kind == "drift" and (cid := self.live_claim(args[0])):
            node = self.fresh.claims[cid].node
            self.store(subjects.drift(node), ev.DriftDetected(node=node, kind="idle-allocation",
                                                                claim_id=cid, at=self.now))
        elif kind == "usage":
            node = f"n{args[0]}"
            devices = [DeviceUsage(uuid=f"GPU-{node}-{i}", utilization_percent=50 if args[1] else 0)
                       for i in range(4)]
            self.store(subjects.node(node), ev.UsageObserved(node=node, devices=devices, at=self.now))
        elif kind == "beat":
            node = f"n{args[0]}"
            self.store(subjects.node(node), ev.NodeHeartbeat(node=node, at=self.now))
        elif kind == "decide" and self.in_flight is None:
            decisions, journal = decide_kept(self.live, DecideContext(now=self.now))
            if not decisions:
                journal.rollback(self.live)
                return
            batch = ev.DecisionBatch(decisions=decisions, allocator="a", at=self.now)
            self.own.hold(self.live, batch, journal)
            self.in_flight = batch
        elif kind == "batch" and self.in_flight is not None:
            batch, self.in_flight = self.in_flight, None
            self.store(subjects.DECISIONS, batch)

    def settled(self) -> bool:
        return self.in_flight is None and not self.own.holding


def _same(live: State, fresh: State) -> None:
    assert compact_digest(live) == compact_digest(fresh)
    assert [(n.name, n.cpu_free, n.mem_free, sorted(n.claims)) for n in live.nodes.values()] == \
        [(n.name, n.cpu_free, n.mem_free, sorted(n.claims)) for n in fresh.nodes.values()]
    assert [(ns, u.tflops, u.vram_mib, u.gpus, u.workers) for ns, u in sorted(live.usage.items())] == \
        [(ns, u.tflops, u.vram_mib, u.gpus, u.workers) for ns, u in sorted(fresh.usage.items())]
    for unit in live.units.values():
        assert set(unit.holders) <= set(live.claims), f"{unit.uuid} held by a claim that is gone"
    assert set(live.idle_watch) <= set(live.claims)
    assert set(live.idle_watch) == set(fresh.idle_watch)  # usage reports folded on top of a batch
    assert {c: x.last_activity for c, x in live.claims.items()} == \
        {c: x.last_activity for c, x in fresh.claims.items()}
    assert {u.uuid: (u.observed_at, u.busy_at) for u in live.units.values()} == \
        {u.uuid: (u.observed_at, u.busy_at) for u in fresh.units.values()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, min_size=30, max_size=80))
def test_the_live_state_equals_a_fresh_fold_of_the_log_whenever_no_batch_is_in_flight(steps):
    world = World()
    for step in steps:
        world.step(*step)
        if world.settled():
            _same(world.live, world.fresh)
    world.step("batch")
    _same(world.live, world.fresh)
