"""The policy's ceiling for a need (`GpuLedger.max_score`: no node scores higher, so the
rank-ordered scan may stop there) is memoised per need with the shape mix in the caller's
FragCache: every choice asks it. A memoised ceiling must be the one computed afresh, also after
the mix changes (a checkpoint moves it) with the same cache. Pure."""

from __future__ import annotations

from ledger.shapes import TypicalShape
from services.allocator.core.demand import Need
from services.allocator.core.fgd import FGD, GpuLedger
from services.allocator.core.frag_cache import FragCache
from services.allocator.core.policy import PlacementContext

H100 = frozenset({"H100"})
MIX_A = ((0.4, TypicalShape(4000, 1000, 1, None)), (0.3, TypicalShape(2000, 500, 1, None)),
         (0.2, TypicalShape(8000, 1000, 8, H100)), (0.1, TypicalShape(1000, 0, 0, None)))
MIX_B = ((0.6, TypicalShape(16000, 250, 1, None)), (0.3, TypicalShape(4000, 1000, 2, None)),
         (0.2, TypicalShape(2000, 750, 1, H100)))
NEEDS = [Need(1, 250, "", 2000, 0, "", None, "250m"), Need(1, 500, "", 8000, 0, "", H100, "500m"),
         Need(1, 1000, "", 4000, 0, "", H100, "1 x H100"), Need(8, 1000, "", 2000, 0, "", H100, "8 x H100"),
         Need(1, 1000, "1g.10gb", 2000, 0, "", None, "1g.10gb"), Need(0, 0, "", 4000, 0, "", None, "cpu"),
         Need(2, 1000, "", 64000, 0, "", None, "2 x any")]


def _fresh(policy, need, mix) -> int:
    return policy.max_score(need, PlacementContext(typical_shapes=mix, frag=FragCache()))


def test_memoised_ceilings_are_the_fresh_ones_across_a_change_of_mix():
    for policy in (GpuLedger(), FGD()):
        cache = FragCache()
        for mix in (MIX_A, MIX_B, MIX_A):  # the same cache all along, as the allocator keeps it
            ctx = PlacementContext(typical_shapes=mix, frag=cache)
            for _ in range(2):  # the second time from the memo
                assert [policy.max_score(need, ctx) for need in NEEDS] == \
                    [_fresh(policy, need, mix) for need in NEEDS]
        # (the mixes give different ceilings: a memo kept across the change would be caught)
        assert [_fresh(policy, n, MIX_A) for n in NEEDS] != [_fresh(policy, n, MIX_B) for n in NEEDS]


def test_the_memo_is_bounded(monkeypatch):
    from services.allocator.core import fgd

    monkeypatch.setattr(fgd, "CEILINGS_KEPT", 4)
    cache, policy = FragCache(), GpuLedger()
    ctx = PlacementContext(typical_shapes=MIX_A, frag=cache)
    for cpu in range(1, 40):
        need = Need(1, 250, "", cpu * 100, 0, "", None, "250m")
        assert policy.max_score(need, ctx) == _fresh(policy, need, MIX_A)
        assert len(cache.compiled["ceilings"]) <= 4
