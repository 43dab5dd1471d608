"""`bench e2e`'s client collects only its youngest generation while the load runs
(bench/e2e/run.py `collector_young_only`): a middle or full collection of its bookkeeping would
pause the publisher and the decision follower inside what it measures."""

from __future__ import annotations

import gc

from bench.e2e.run import collector_young_only


def _collections_while(work) -> set[int]:
    seen: set[int] = set()

    def note(phase, info):
        if phase == "start":
            seen.add(info["generation"])

    gc.callbacks.append(note)
    try:
        work()
    finally:
        gc.callbacks.remove(note)
    return seen


def _bookkeeping():
    """What a run keeps: many small containers that live on (each young collection moves them up)."""
    kept = []
    for i in range(200_000):
        kept.append({"claim": i, "times": [0.0, 1.0]})
    return kept


def test_only_the_youngest_generation_is_collected_while_the_load_runs():
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    with collector_young_only():
        assert gc.get_freeze_count() >= frozen  # what lived before the run is frozen
        assert _collections_while(_bookkeeping) == {0}
    assert gc.get_threshold() == thresholds and gc.get_freeze_count() == 0
    # without it, the same work reaches the older generations
    assert _collections_while(_bookkeeping) - {0}
