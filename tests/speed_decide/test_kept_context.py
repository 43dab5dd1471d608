"""A claim's placement context (its rule arguments, the shape mix, the model prices, the caller's
memos) is kept in the caller's memo when no node is held (and the caller keeps its FragCache), and the next pass takes it up instead of
building it again (place._placement_context): built once for claims alike over many passes, again
when the mix changes or a node is held (the context then names the nodes closed to the claim).
Decisions are those of passes that keep nothing (tests/property/test_memo_equivalence.py). Pure."""

from __future__ import annotations

from ledger.shapes import TypicalShape, typical_shapes
from services.allocator.core import place
from services.allocator.core.frag_cache import FragCache
from tests.fleet import Ledger, claim, h100_node

MIX = typical_shapes({TypicalShape(4000, 1000, 1, None): 5, TypicalShape(8000, 500, 1, None): 3})
OTHER_MIX = typical_shapes({TypicalShape(2000, 250, 1, None): 4, TypicalShape(8000, 1000, 2, None): 1})


def _built(monkeypatch) -> list:
    made = []
    real = place.PlacementContext

    def counted(**fields):
        made.append(fields["args"])
        return real(**fields)

    monkeypatch.setattr(place, "PlacementContext", counted)
    return made


def _passes(ledger: Ledger, memo, mixes, frag=None) -> list:
    decided = []
    frag = frag or FragCache()  # the caller's, kept across passes as the allocator keeps it
    for n, mix in enumerate(mixes, start=len(ledger.state.claims)):
        ledger.append(claim(f"c{n}", gpus=1, gpu_milli=250, cpu_milli=2000, at=float(n)))
        decided += ledger.decide(float(n), memo=memo, frag=frag, evict=False, typical_shapes=mix)
    return decided


def _ledger() -> Ledger:
    ledger = Ledger()
    ledger.append(*(h100_node(f"h{i}") for i in range(3)))
    return ledger


def test_claims_alike_over_many_passes_build_one_context(monkeypatch):
    made = _built(monkeypatch)
    ledger, memo, frag = _ledger(), {}, FragCache()
    _passes(ledger, memo, [MIX] * 2, frag)  # (the first pass's score memo starts, clearing the memo once)
    made.clear()
    assert len(_passes(ledger, memo, [MIX] * 10, frag)) == 10 and made == []


def test_a_new_mix_builds_a_new_context_and_no_memo_builds_one_each_pass(monkeypatch):
    made = _built(monkeypatch)
    _passes(_ledger(), {}, [MIX] * 4 + [OTHER_MIX] * 4 + [MIX] * 4)
    assert len(made) == 6  # two passes of each mix build one (the first clears the memo)
    made.clear()
    _passes(_ledger(), None, [MIX] * 5)
    assert len(made) == 5


def test_kept_contexts_decide_as_fresh_ones():
    mixes = [MIX] * 6 + [OTHER_MIX] * 6
    assert _passes(_ledger(), {}, mixes) == _passes(_ledger(), None, mixes)
