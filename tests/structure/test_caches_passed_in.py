"""The pure core keeps no state of its own between calls: every memo it uses is the caller's,
passed in through the decision context, so a what-if run never shares or clears the live
allocator's caches."""

from __future__ import annotations

import importlib
import pkgutil

import services.allocator.core as core
from services.allocator.core.decide import DecideContext, decide
from services.allocator.core.frag_cache import FragCache
from ledger.shapes import TypicalShape
from tests.fleet import Ledger, claim, h100_node

OTHER_MIX = ((1.0, TypicalShape(milli=500, cpu=1000, count=1, models=None)),)


def mutable_globals() -> dict[str, int]:
    """Size of every dict, list and set at module level in the core (registries included)."""
    sizes = {}
    for info in pkgutil.iter_modules(core.__path__):
        module = importlib.import_module(f"{core.__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, (dict, list, set)) and not name.startswith("__"):
                sizes[f"{info.name}.{name}"] = len(value)
    return sizes


def busy_ledger() -> Ledger:
    ledger = Ledger()
    ledger.append(h100_node("h0"), h100_node("h1"))
    ledger.append(*[claim(f"s{i}", gpus=1, gpu_milli=250, cpu_milli=2000) for i in range(6)])
    ledger.append(*[claim(f"w{i}", gpus=2, models=["H100"]) for i in range(3)])
    return ledger


def test_deciding_changes_no_module_state_of_the_core():
    before = mutable_globals()
    ledger = busy_ledger()
    ledger.decide(1.0)
    decide(ledger.state, DecideContext(now=2.0, typical_shapes=OTHER_MIX))
    assert mutable_globals() == before


def test_a_what_if_run_leaves_the_live_allocators_memos_alone():
    live, what_if = FragCache(), FragCache()
    ledger = busy_ledger()
    decisions = ledger.decide(1.0, frag=live)
    assert decisions and live.views and live.shapes is ledger.state.typical
    kept = dict(live.views)
    other = busy_ledger()
    decide(other.state, DecideContext(now=1.0, typical_shapes=OTHER_MIX, frag=what_if))
    assert what_if.shapes is OTHER_MIX and what_if.views
    assert live.shapes is ledger.state.typical and live.views == kept
