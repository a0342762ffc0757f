"""genesis/gc_tuning.py: the start-up heap is frozen out of collections, and pauses are counted."""

from __future__ import annotations

import gc

from prometheus_client import REGISTRY

from genesis import gc_tuning


def test_objects_alive_at_freeze_are_skipped_by_later_collections():
    before = gc.get_freeze_count()
    survivor = [object()]  # a GC-tracked container, alive when the heap is frozen
    try:
        frozen = gc_tuning.freeze_startup_heap()
        assert frozen > before
        assert not any(o is survivor for o in gc.get_objects())  # in no generation a collection walks
        newcomer = [object()]
        assert any(o is newcomer for o in gc.get_objects())  # objects made later are collected as usual
    finally:
        gc.unfreeze()  # the rest of the test session keeps the default behaviour
    assert any(o is survivor for o in gc.get_objects())


def test_every_collection_is_timed_per_generation():
    gc_tuning.observe_gc_pauses()
    gc_tuning.observe_gc_pauses()  # idempotent: one callback, one collector

    def count(generation: str) -> float:
        return REGISTRY.get_sample_value("genesis_gc_pause_seconds_count", {"generation": generation}) or 0.0

    full_before, young_before = count("2"), count("0")
    gc.collect()
    gc.collect(0)
    assert count("2") >= full_before + 1  # (an automatic collection may add to either)
    assert count("0") >= young_before + 1
    assert REGISTRY.get_sample_value("genesis_gc_pause_seconds_sum", {"generation": "2"}) > 0
    assert REGISTRY.get_sample_value("genesis_gc_pause_max_seconds", {"generation": "2"}) > 0
    assert sum(cb == gc_tuning._collector.callback for cb in gc.callbacks) == 1
