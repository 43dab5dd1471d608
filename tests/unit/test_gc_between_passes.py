"""The allocator collects garbage between decision passes, when CPython's thresholds call for it,
instead of inside whichever pass crosses them."""

from __future__ import annotations

import gc
import weakref

import pytest

from services.allocator import loop
from services.allocator.loop import collect_between_passes


@pytest.fixture
def manual_gc():
    was_on, thresholds = gc.isenabled(), gc.get_threshold()
    gc.disable()
    gc.collect()
    yield
    gc.set_threshold(*thresholds)
    if was_on:
        gc.enable()


class Node:
    pass


def test_nothing_is_collected_below_the_threshold(manual_gc):
    gc.set_threshold(100_000, 10, 10)
    assert collect_between_passes() is None


def test_a_collection_runs_once_the_threshold_is_passed_and_frees_cycles(manual_gc):
    gc.set_threshold(500, 10, 10)
    cycle = Node()
    cycle.me = cycle
    gone = []
    weakref.finalize(cycle, gone.append, True)
    del cycle
    keep = [[] for _ in range(600)]  # tracked allocations past the gen-0 threshold
    assert gc.get_count()[0] >= 500
    assert collect_between_passes() in (0, 1, 2)
    assert gone == [True]
    assert gc.get_count()[0] < 500
    del keep


def test_survivors_are_frozen_where_an_older_generation_was_due_and_all_collected_rarely(manual_gc, monkeypatch):
    monkeypatch.setattr(loop, "UNFREEZE_EVERY", 3)
    monkeypatch.setattr(loop, "_between", {"young": 0, "freezes": 0})
    gc.set_threshold(10, 2, 2)
    generations, kept = [], []
    for _ in range(12):
        kept.append([[] for _ in range(20)])  # survivors, as a pass's new state is
        generations.append(collect_between_passes())
    # young, freeze, young, freeze, young, full collection (the third freeze), ...
    assert generations == [0, 1, 0, 1, 0, 2] * 2
    assert gc.get_freeze_count() > 0
