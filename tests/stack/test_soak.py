"""Half a minute of 30 live traits of 10 agents in the paced engine loop (bench/soak.py, short): the
trait host stays up, every tick runs with its traits, no benign trait is quarantined, and the
host's memory is flat after the warm-up."""

from __future__ import annotations

from bench.soak import run_soak
from tests.own_stack import redis_db_below


async def test_thirty_traits_keep_the_host_up_and_its_memory_flat(settings):
    result = await run_soak(
        30.0,
        traits=30,
        agents=10,
        redis_url=redis_db_below(5),
        warmup_s=10.0,
        sample_s=1.5,
        settings=settings.override(engine_snapshot_interval=300, engine_trait_gain_chance=0.25),
    )
    assert result["host_restarts"] == 0, result
    assert result["skipped_ticks"] == 0, result
    assert result["quarantined"] == [], result
    assert result["host_processes"] == 10, result
    assert result["memory_samples"] >= 10 and result["host_memory_growth_pct"] < 10.0, result
    assert result["ticks_per_s_p50"] > 0, result
