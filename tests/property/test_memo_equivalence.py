"""The placement memo (kept across passes, as the allocator keeps it) never changes a decision.

Scores are memoised per node view, and for fragmentation-aware policies also across needs that
differ only in CPU where the policy says CPU cannot matter (`cpu_margin`). Random claims with CPU
requests up to a node's whole CPU make some nodes CPU-tight, so both the shared and the exact
memo are exercised; the decisions must equal those of passes that memoise nothing.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import events as ev
from ledger.shapes import TypicalShape, typical_shapes
from tests.fleet import Ledger, claim, h100_node

# A fixed mix keeps the memo alive across passes (a learned mix moves, and clears it, early on).
MIX = typical_shapes({TypicalShape(4000, 1000, 1, None): 5, TypicalShape(8000, 500, 1, None): 3,
                      TypicalShape(16000, 1000, 2, None): 2, TypicalShape(2000, 0, 0, None): 1})

claims = st.tuples(
    st.sampled_from([(1, 0), (1, 100), (1, 250), (1, 500), (2, 0), (4, 0), (0, 0)]),  # gpus, milli
    st.sampled_from([1000, 2000, 4000, 8000, 32000, 64000, 120000]),  # CPU milli
)
steps = st.lists(st.one_of(st.tuples(st.just("submit"), claims),
                           st.tuples(st.just("release"), st.integers(0, 100))), min_size=5, max_size=60)


def _run(sequence, policy: str, memo: dict | None) -> list:
    ledger = Ledger()
    ledger.append(*(h100_node(f"h{i}") for i in range(3)))
    made, ids = [], []
    for n, (kind, arg) in enumerate(sequence):
        if kind == "submit":
            (gpus, milli), cpu = arg
            claim_id = f"c{n}"
            ids.append(claim_id)
            ledger.append(claim(claim_id, gpus=gpus, gpu_milli=milli or 1000, cpu_milli=cpu, at=float(n)))
        elif ids:
            ledger.append(ev.ClaimReleased(claim_id=ids[arg % len(ids)], at=float(n)))
        made.extend(ledger.decide(float(n), policy=policy, memo=memo, evict=False, typical_shapes=MIX))
    return made


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=steps, policy=st.sampled_from(["gpuledger", "fgd", "binpack"]))
def test_memoised_passes_decide_as_unmemoised_ones(sequence, policy):
    assert _run(sequence, policy, memo={}) == _run(sequence, policy, memo=None)
