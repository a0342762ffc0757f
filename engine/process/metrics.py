"""Prometheus metrics of the world engine (served by genesis.metrics.serve_metrics).

The tick duration is a histogram observed by the loop (one observation per tick, a few µs). Every
other value already lives on the Engine and its trait runner, so a collector reads it at scrape
time instead of keeping a second copy in step: nothing to update in the 16 ms tick."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .loop import Engine

# Budget at 60 ticks/s is 16.7 ms: buckets resolve around it and show how far an overrun went.
TICK_SECONDS = Histogram(
    "genesis_engine_tick_duration_seconds",
    "Work of one world tick (traits, step, telemetry hand-off)",
    buckets=(0.001, 0.002, 0.004, 0.008, 0.0167, 0.033, 0.066, 0.133, 0.25, 0.5, 1.0),
)


class EngineCollector(Collector):
    """Reads the engine's own counters when Prometheus scrapes (from the exporter's thread:
    only atomic reads of ints, floats, a tuple and dict lengths)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        engine = self.engine
        world = engine.world
        yield GaugeMetricFamily("genesis_engine_tick", "Current world tick", value=world.tick)
        yield GaugeMetricFamily(
            "genesis_engine_ticks_per_second",
            "Ticks per second over the last status interval (~1 s)",
            value=engine.ticks_per_second,
        )
        yield CounterMetricFamily("genesis_engine_ticks", "Ticks run by this engine process", value=engine.ticks_run)
        yield GaugeMetricFamily(
            "genesis_engine_fast_forward",
            "1 while the engine runs fast-forward (unpaced), else 0",
            value=int(engine.fast_forward),
        )
        yield CounterMetricFamily(
            "genesis_engine_tick_overruns",
            "Ticks whose work exceeded the budget 1/tick_rate",
            value=engine.tick_overruns,
        )
        yield CounterMetricFamily("genesis_engine_snapshots", "WorldSnapshots taken", value=engine.snapshots_taken)
        yield GaugeMetricFamily("genesis_engine_entities", "Living Molbots", value=world.population)
        yield GaugeMetricFamily("genesis_engine_resources", "Food items in the world", value=len(world.resources))
        yield GaugeMetricFamily(
            "genesis_engine_live_traits",
            "Traits active in the world (loaded, not quarantined)",
            value=len(engine.active_traits),
        )
        stats = getattr(engine.runner, "stats", None)  # HostTraitRunner; absent without a trait host
        if stats is not None:
            yield CounterMetricFamily(
                "genesis_engine_trait_host_restarts",
                "Trait-host containers replaced (died, hung, or replied malformed)",
                value=stats.restarts,
            )
            caused = CounterMetricFamily(
                "genesis_engine_trait_host_restarts_caused",
                "Trait-host restarts charged to a trait (the host failed right after that trait's worker was killed)",
                labels=["trait"],
            )
            for trait, count in sorted(stats.restarts_caused.items()):
                caused.add_metric([trait], count)
            yield caused
            yield CounterMetricFamily(
                "genesis_engine_trait_host_deadline_misses",
                "Trait-host ticks that missed GENESIS_ENGINE_TRAIT_DEADLINE_MS",
                value=stats.deadline_misses,
            )
            yield CounterMetricFamily(
                "genesis_engine_trait_host_late_ticks",
                "Trait-host replies past GENESIS_ENGINE_TRAIT_DEADLINE_MS but within one more: used, the tick was slow",
                value=stats.late_ticks,
            )
            yield CounterMetricFamily(
                "genesis_engine_traits_quarantined", "Traits quarantined since start", value=len(stats.quarantined)
            )
            yield CounterMetricFamily(
                "genesis_engine_trait_host_skipped_ticks",
                "Ticks whose traits did not run because the trait host was (re)starting",
                value=stats.skipped_ticks,
            )
            yield CounterMetricFamily(
                "genesis_engine_trait_results_lost",
                "A trait's tick lost through nobody's fault (its process killed for another's, "
                "or the machine too busy)",
                value=stats.lost_results,
            )
            yield CounterMetricFamily(
                "genesis_engine_trait_results_throttled",
                "A trait's tick sat out because its agent used more than its fair share of the traits' CPU",
                value=stats.throttled_results,
            )
            yield CounterMetricFamily(
                "genesis_engine_trait_suspects",
                "Traits moved to a process of their own after a kill while they ran",
                value=stats.suspects,
            )
            yield CounterMetricFamily(
                "genesis_engine_trait_drift_suspects",
                "Live traits moved to a process of their own because they departed sharply from their sandbox profile",
                value=stats.drift_suspects,
            )
            yield CounterMetricFamily(
                "genesis_engine_trait_intents_foreign",
                "Intents refused because their entity carried no trait of the agent whose worker sent them",
                value=stats.foreign_intents,
            )
            yield GaugeMetricFamily(
                "genesis_engine_trait_host_memory_bytes",
                "Anonymous memory of the trait-host container (its cgroup), sampled every few seconds",
                value=stats.host_memory_bytes,
            )
            yield GaugeMetricFamily(
                "genesis_engine_trait_host_processes",
                "Worker processes in the trait host (one per agent with live traits, plus suspects)",
                value=stats.host_processes,
            )
        journal = engine.journal
        if journal is not None:
            head = journal.head
            yield GaugeMetricFamily(
                "genesis_engine_journal_seq",
                "Sequence number of the journal's last record",
                value=head.seq if head else -1,
            )
            yield GaugeMetricFamily(
                "genesis_engine_journal_epoch", "The journal's epoch (one more per rollback)", value=journal.epoch
            )
            yield CounterMetricFamily(
                "genesis_engine_journal_records",
                "Journal records appended by this engine process",
                value=journal.records,
            )
            yield CounterMetricFamily(
                "genesis_engine_journal_append_seconds",
                "Time spent appending journal records (state digest, encoding, write)",
                value=journal.append_s,
            )
            yield CounterMetricFamily(
                "genesis_engine_journal_snapshots",
                "Snapshots bound to the journal saved by this process",
                value=journal.snapshots_saved,
            )
