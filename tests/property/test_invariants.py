"""Invariants over random command sequences (hypothesis).

No unit over capacity, never a unit granted twice, quota never exceeded by a decision, the fold of
the log equals the live state, a snapshot plus the tail equals the full replay, and decide is
deterministic and leaves the state untouched.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import events as ev
from schemas.types import QuotaSpec, QuotaTotal, Resources
from services.allocator.core.decide import DecideContext, decide
from ledger.evolve import fold
from ledger.snapshot import from_snapshot, to_snapshot
from ledger.state import FREE
from tests.fleet import Ledger, a100_mig_node, claim, h100_node
from ledger.digest import live_digest
from tests.property.digest import digest

NAMESPACES = ("team-a", "team-b", "team-c")

shapes = st.one_of(
    st.builds(dict, gpus=st.integers(1, 8), models=st.just(["H100"])),
    st.builds(dict, gpus=st.just(1), gpu_milli=st.integers(100, 900)),
    st.builds(dict, gpus=st.just(1), mig_profile=st.sampled_from(["1g.10gb", "3g.40gb", "4g.40gb"])),
    st.builds(dict, gpus=st.integers(1, 2), gpu_memory_gib=st.sampled_from([10.0, 20.0, 40.0]),
              models=st.just(["H100"])),
    st.builds(dict, gpus=st.just(0), model_memory_gib=st.sampled_from([60.0, 150.0, 300.0]),
              models=st.just(["H100"])),
    st.builds(dict, gpus=st.just(0), cpu_milli=st.integers(1000, 8000)),
)

steps = st.one_of(
    st.tuples(st.just("submit"), shapes, st.sampled_from(NAMESPACES), st.integers(-1, 2),
              st.sampled_from([0.0, 0.0, 30.0])),
    st.tuples(st.just("gang"), st.integers(1, 4), st.integers(1, 8)),
    st.tuples(st.just("release"), st.integers(0, 200)),
    st.tuples(st.just("decide"), st.floats(0.5, 40.0)),
    st.tuples(st.just("quota"), st.sampled_from(NAMESPACES), st.integers(0, 3000), st.integers(0, 6)),
    st.tuples(st.just("fault"), st.sampled_from(["h0", "h1"]), st.integers(0, 7),
              st.sampled_from(["Faulted", "Healthy"])),
    st.tuples(st.just("heartbeat"), st.sampled_from(["h0", "h1", "a0"])),
    st.tuples(st.just("renew"), st.integers(0, 200)),
    st.tuples(st.just("snapshot"),),
)


class World:
    def __init__(self) -> None:
        self.ledger = Ledger()
        self.now = 0.0
        self.ids: list[str] = []
        self.snapshot: tuple[bytes, int] | None = None
        self.ledger.append(h100_node("h0"), h100_node("h1"), a100_mig_node("a0"))

    def run(self, step) -> None:
        getattr(self, f"_{step[0]}")(*step[1:])
        check_capacity(self.ledger.state)

    def _submit(self, shape, namespace, priority, lease) -> None:
        claim_id = f"c{len(self.ids)}"
        self.ids.append(claim_id)
        self.ledger.append(claim(claim_id, namespace, priority=priority, lease_seconds=lease, at=self.now, **shape))

    def _gang(self, size, gpus) -> None:
        gang = f"g{len(self.ids)}"
        for _ in range(size):
            claim_id = f"c{len(self.ids)}"
            self.ids.append(claim_id)
            self.ledger.append(claim(claim_id, gpus=gpus, models=["H100"], gang_id=gang, gang_size=size,
                                     at=self.now))

    def _release(self, i) -> None:
        if self.ids:
            self.ledger.append(ev.ClaimReleased(claim_id=self.ids[i % len(self.ids)], at=self.now))

    def _renew(self, i) -> None:
        if self.ids:
            self.ledger.append(ev.LeaseRenewed(claim_id=self.ids[i % len(self.ids)], at=self.now))

    def _heartbeat(self, node) -> None:
        self.ledger.append(ev.NodeHeartbeat(node=node, at=self.now))

    def _fault(self, node, index, health) -> None:
        self.ledger.append(ev.DeviceHealthChanged(node=node, uuid=f"GPU-{node}-{index}", health=health,
                                                  at=self.now))

    def _quota(self, namespace, tflops, workers) -> None:
        spec = QuotaSpec(total=QuotaTotal(requests=Resources(tflops=float(tflops)), max_workers=workers))
        self.ledger.append(ev.QuotaSet(namespace=namespace, spec=spec, at=self.now))

    def _decide(self, dt) -> None:
        self.now += dt
        state = self.ledger.state
        ctx = DecideContext(now=self.now, node_timeout_s=60.0, stale_after_s=50.0)
        before = digest(state)
        decisions = decide(state, ctx)
        assert digest(state) == before, "decide changed the state"
        assert decide(state, ctx) == decisions, "decide is not deterministic"
        if decisions:
            usage_before = {ns: (u.tflops, u.workers) for ns, u in state.usage.items()}
            self.ledger.append(ev.DecisionBatch(decisions=decisions, at=self.now))
            check_quota(state, decisions, usage_before)
            for d in decisions:  # decide never proposes what the fold would refuse as void
                if isinstance(d, ev.ClaimAllocated):
                    assert state.claims[d.claim_id].grants == d.grants, f"void allocation {d}"

    def _snapshot(self) -> None:
        self.snapshot = (to_snapshot(self.ledger.state), to_snapshot(self.ledger.state, compact=True),
                         len(self.ledger.events))


def check_capacity(state) -> None:
    for unit in state.units.values():
        assert 0 <= unit.milli_free <= FREE
        assert unit.milli_free == FREE - sum(unit.holders.values())
        if any(m >= FREE for m in unit.holders.values()):
            assert len(unit.holders) == 1, f"{unit.uuid} whole and shared at once"
        if unit.max_holders:
            assert len(unit.holders) <= unit.max_holders
    for c in state.claims.values():
        if c.holds_devices:
            for g in c.grants:
                assert state.units[g.uuid].holders.get(c.claim_id) == g.milli
        else:
            assert not any(c.claim_id in u.holders for u in state.units.values())
    for node in state.nodes.values():
        assert node.cpu_free >= 0 and node.mem_free >= 0


def check_quota(state, decisions, usage_before) -> None:
    """A namespace that was within its quota is within it after the decisions that charged it."""
    charged = {d.namespace for d in decisions if isinstance(d, ev.ClaimAllocated)}
    for namespace in charged:
        quota = state.quotas.get(namespace)
        if quota is None:
            continue
        usage = state.usage[namespace]
        before_tflops, before_workers = usage_before.get(namespace, (0.0, 0))
        limit = quota.total.requests.tflops
        if limit is not None and before_tflops <= limit:
            assert usage.tflops <= limit + 1e-6, f"{namespace} over its TFLOPS quota"
        workers = quota.total.max_workers
        if workers is not None and before_workers <= workers:
            assert usage.workers <= workers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, min_size=5, max_size=60))
def test_invariants_hold_for_any_sequence(sequence):
    world = World()
    for step in sequence:
        world.run(step)
    world.run(("decide", 1.0))
    live = digest(world.ledger.state)
    assert digest(fold(world.ledger.events)) == live, "replay differs from the live state"
    if world.snapshot is not None:
        data, compact, upto = world.snapshot
        restored = fold(world.ledger.events[upto:], from_snapshot(data))
        assert digest(restored) == live, "snapshot + tail differs from the full replay"
        restored = fold(world.ledger.events[upto:], from_snapshot(compact))
        assert live_digest(restored) == live_digest(world.ledger.state), "compact snapshot + tail differs"
