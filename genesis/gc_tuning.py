"""Garbage collection for the long-running processes (API, worker, engine).

After start-up a Genesis process holds ~150,000 GC-tracked objects that live as long as it does
(modules, pydantic and SQLAlchemy schemas, the Temporal client). CPython's full (generation 2)
collection walks all of them, pausing every request or tick for 40-90 ms on this machine: the
propose endpoint's p99 at 100 req/s was such pauses. ``freeze_startup_heap`` moves what exists
at start-up to the permanent generation that collections skip (``gc.freeze``; objects created
later are collected as usual).

``observe_gc_pauses`` times every collection so ``/metrics`` shows whether pauses are back:
``genesis_gc_pause_seconds`` (count/sum per generation) and ``genesis_gc_pause_max_seconds``;
``genesis_gc_frozen_objects`` is what the freeze exempted (0: not frozen yet).
The callback only adds numbers (no locks: it runs inside whatever code allocated)."""

from __future__ import annotations

import gc
import time

from prometheus_client.core import REGISTRY, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

GENERATIONS = (0, 1, 2)


def freeze_startup_heap() -> int:
    """Collect once, then exempt every surviving object from later collections. Returns how many
    objects were frozen (for the start-up log)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class _PauseCollector(Collector):
    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total_s = [0.0, 0.0, 0.0]
        self.max_s = [0.0, 0.0, 0.0]
        self._started = 0.0

    def callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        elapsed = time.perf_counter() - self._started
        generation = info["generation"]
        self.count[generation] += 1
        self.total_s[generation] += elapsed
        if elapsed > self.max_s[generation]:
            self.max_s[generation] = elapsed

    def collect(self):
        pauses = SummaryMetricFamily(
            "genesis_gc_pause_seconds", "Time spent in CPython garbage collections", labels=["generation"]
        )
        longest = GaugeMetricFamily(
            "genesis_gc_pause_max_seconds", "Longest CPython garbage collection so far", labels=["generation"]
        )
        for generation in GENERATIONS:
            label = [str(generation)]
            pauses.add_metric(label, self.count[generation], self.total_s[generation])
            longest.add_metric(label, self.max_s[generation])
        yield pauses
        yield longest
        yield GaugeMetricFamily(
            "genesis_gc_frozen_objects",
            "Objects of the start-up heap exempted from collections (gc.freeze)",
            value=gc.get_freeze_count(),
        )


_collector: _PauseCollector | None = None


def observe_gc_pauses() -> None:
    """Time every collection of this process into the default Prometheus registry (idempotent)."""
    global _collector
    if _collector is None:
        _collector = _PauseCollector()
        gc.callbacks.append(_collector.callback)
        REGISTRY.register(_collector)
