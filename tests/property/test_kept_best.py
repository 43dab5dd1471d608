"""The best node kept per need across passes (placement's `_kept_best`, brought up to date from
`State.group_log`) decides exactly as a scan of every candidate group.

Random fleets of the benchmark's mix (H100 in two NVLink islands, A100 whole and in MIG mode,
L40S; zones, CUDA versions) take random arrivals of the benchmark's claim mix (whole cards, shares,
MIG profiles, memory-sized and tensor-parallel claims, gangs) and releases; passes with the memo
kept across them (as the allocator keeps it) must make the same decisions as passes that keep
nothing and scan, and, at every step, a kept answer must equal a fresh scan of the same state.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.workload import claim_mix, fleet
from schemas import events as ev
from services.allocator.core import placement
from services.allocator.core.decision_pass import Pass
from services.allocator.core.demand import needs_for
from services.allocator.core.place import _placement_context
from services.allocator.core.rules import rule_args
from services.allocator.core.scorers import get_policy
from tests.fleet import Ledger

steps = st.lists(st.one_of(st.tuples(st.just("arrive"), st.integers(1, 4)),
                           st.tuples(st.just("release"), st.integers(0, 1000))), min_size=5, max_size=40)


def _run(nodes: int, seed: int, sequence, policy: str, memo: dict | None) -> list:
    ledger, rng, made, arrivals = Ledger(), random.Random(seed), [], 0
    ledger.append(*fleet(nodes, seed))
    for n, (kind, arg) in enumerate(sequence):
        if kind == "arrive":
            for _ in range(arg):
                arrivals += 1
                ledger.append(*(ev.ClaimSubmitted(claim=spec, at=float(n))
                                for spec in claim_mix(rng, f"c{arrivals}", float(n))))
        else:
            holding = [c for c in ledger.state.claims.values() if c.holds_devices]
            if holding:
                ledger.append(ev.ClaimReleased(claim_id=holding[arg % len(holding)].claim_id, at=float(n)))
        made.extend(ledger.decide(float(n), policy=policy, memo=memo, evict=False))
    return made


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.integers(4, 40), seed=st.integers(0, 10_000), sequence=steps,
       policy=st.sampled_from(["gpuledger", "fgd", "binpack", "bestfit"]))
def test_kept_best_decides_as_a_scan_of_every_group(nodes, seed, sequence, policy):
    assert _run(nodes, seed, sequence, policy, memo={}) == _run(nodes, seed, sequence, policy, memo=None)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.integers(4, 40), seed=st.integers(0, 10_000), sequence=steps)
def test_every_kept_answer_equals_a_fresh_scan(nodes, seed, sequence):
    """Each step: the need of every pending claim asked through the kept memo (warm) and through a
    scan with no memo give the same node, units and score."""
    ledger, rng, memo, arrivals = Ledger(), random.Random(seed), {}, 0
    ledger.append(*fleet(nodes, seed))
    policy = get_policy("gpuledger")
    for n, (kind, arg) in enumerate(sequence):
        for _ in range(arg if kind == "arrive" else 0):
            arrivals += 1
            ledger.append(*(ev.ClaimSubmitted(claim=spec, at=float(n))
                            for spec in claim_mix(rng, f"c{arrivals}", float(n))))
        ledger.decide(float(n), memo=memo, evict=False)
        state = ledger.state
        models = sorted(k for k in state.groups_by_model if k)
        for claim_id in list(state.pending)[:20]:
            claim = state.claims[claim_id]
            for need in needs_for(claim.spec, models):
                kept, fresh = (_choose(ledger, claim, need, policy, m) for m in (memo, None))
                assert kept == fresh


def _choose(ledger, claim, need, policy, memo):
    from services.allocator.core.decide import DecideContext

    run = Pass(DecideContext(now=0.0, memo=memo, evict=False, check_timers=False))
    pctx = _placement_context(ledger.state, run, claim, rule_args(claim.spec, ledger.state))
    return placement.choose(ledger.state, need, policy, pctx)
