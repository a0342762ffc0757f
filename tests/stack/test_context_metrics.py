"""GET /api/agents/context/metrics: the seed shape, built from a real engine's latest
WorldSnapshot, and the Watcher's anomaly rules (logic-flow.md 2.3) it reports."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from evolution import world_metrics
from evolution.world_metrics import detect_anomalies, metrics_document, parse_snapshot
from genesis import redis_keys as keys

SEED_METRICS_FIELDS = {
    "tick",
    "entity_count",
    "avg_energy",
    "resource_count",
    "death_stats",
    "trait_usage",
    "anomalies",
}


def snap(
    n: int,
    energy: float = 50.0,
    *,
    births: int = 0,
    starvation: int = 0,
    collision: int = 0,
    age: int = 0,
    diversity: int = 5,
    density: float = 0.5,
) -> dict:
    return {
        "entity_count": n,
        "avg_energy": energy,
        "births_last_period": births,
        "deaths_last_period": starvation + collision + age,
        "death_starvation": starvation,
        "death_collision": collision,
        "death_age": age,
        "trait_diversity": diversity,
        "resource_density": density,
    }


def types(history, **kwargs) -> list[str]:
    return [a.type for a in detect_anomalies(history, max_entities=kwargs.pop("max_entities", 1000), **kwargs)]


def test_trends_need_two_snapshots():
    assert types([snap(60, 10.0, diversity=0, starvation=50)]) == []


def test_mass_extinction_is_named_by_its_leading_cause():
    found = detect_anomalies([snap(80, starvation=30, collision=5), snap(100)], max_entities=1000)
    assert [(a.type, a.severity, a.area) for a in found] == [("starvation", "high", "traits")]
    assert types([snap(80, collision=40, starvation=5), snap(100)]) == ["overcrowding"]
    assert types([snap(80, age=40), snap(100)]) == ["environmental"]
    critical = detect_anomalies([snap(80, starvation=45), snap(100)], max_entities=1000)
    assert critical[0].severity == "critical"
    assert types([snap(95, starvation=35), snap(100)]) == []  # population fell by only 5%


def test_overpopulation_energy_crisis_and_low_diversity():
    assert types([snap(250, births=60, starvation=5), snap(240)], max_entities=100) == ["overpopulation"]
    assert types([snap(250, births=5, starvation=5), snap(240)], max_entities=100) == []
    # reachable: births stop at the cap, so the rule fires as the population presses on it
    assert types([snap(950, births=120, starvation=20), snap(880)], max_entities=1000) == ["overpopulation"]
    assert types([snap(850, births=120, starvation=20), snap(780)], max_entities=1000) == []
    assert types([snap(1000, births=20, starvation=20), snap(1000)], max_entities=1000) == []  # held at the cap
    assert types([snap(100, 15.0), snap(100, 25.0)]) == ["energy_crisis"]
    assert types([snap(100, 15.0), snap(100, 18.0)]) == []
    assert types([snap(60, diversity=2), snap(60, diversity=2)]) == ["low_diversity"]
    assert types([snap(40, diversity=0), snap(40, diversity=0)]) == []


def test_stagnation_needs_five_flat_snapshots_and_no_recent_mutation():
    flat = [snap(100, 50.0 + i * 0.1) for i in range(5)]
    assert types(flat) == ["stagnation"]
    assert types(flat, mutation_applied_recently=True) == []
    assert types(flat[:4]) == []
    moving = flat[:4] + [snap(110)]
    assert types(moving) == []


def test_metrics_document_is_the_seed_shape_most_severe_anomaly_first():
    latest = parse_snapshot(
        {
            b"tick": b"45200",
            b"entity_count": b"134",
            b"avg_energy": b"42.7",
            b"resource_count": b"89",
            b"death_starvation": b"12",
            b"death_collision": b"3",
            b"death_age": b"0",
            b"trait_usage": b'{"heat_shield":45,"resource_seeker":78}',
            b"dominant_trait": b"",
        }
    )
    anomalies = [
        world_metrics.Anomaly("low_diversity", "medium", "traits"),
        world_metrics.Anomaly("starvation", "critical", "traits"),
    ]
    assert metrics_document(latest, anomalies) == {
        "tick": 45200,
        "entity_count": 134,
        "avg_energy": 42.7,
        "resource_count": 89,
        "death_stats": {"starvation": 12, "collision": 3, "age": 0},
        "trait_usage": {"heat_shield": 45, "resource_seeker": 78},
        "anomalies": ["starvation", "low_diversity"],
    }


async def wait_for_snapshots(redis_client, settings, count: int, timeout_s: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        history = await world_metrics.recent_snapshots(redis_client, settings.engine.snapshot_interval)
        if len(history) >= count:
            return history
        await asyncio.sleep(0.2)
    raise AssertionError(f"the engine wrote fewer than {count} snapshots in {timeout_s}s")


async def test_metrics_from_the_latest_real_snapshot(http, settings, engine_proc, redis_client):
    # A leftover of an older run with a higher tick must not pass for the latest snapshot.
    stale_key = keys.world_snapshot(9_999_990)
    await redis_client.hset(
        stale_key,
        mapping={
            "tick": "9999990",
            "timestamp": "1000.0",
            "run_id": "old-run",
            "entity_count": "1",
            "avg_energy": "1.0",
        },
    )
    await redis_client.expire(stale_key, 60)
    try:
        await wait_for_snapshots(redis_client, settings, 2)
        response = await http.get("/api/agents/context/metrics")
        assert response.status_code == 200, response.text
        metrics = response.json()
    finally:
        await redis_client.delete(stale_key)
    assert set(metrics) == SEED_METRICS_FIELDS
    assert metrics["tick"] > 0 and metrics["tick"] % settings.engine.snapshot_interval == 0
    raw = await redis_client.hgetall(keys.world_snapshot(metrics["tick"]))
    assert raw, "the snapshot the metrics came from exists"
    snapshot = parse_snapshot(raw)
    assert metrics["entity_count"] == snapshot["entity_count"] > 0
    assert metrics["avg_energy"] == pytest.approx(snapshot["avg_energy"])
    assert metrics["resource_count"] == snapshot["resource_count"]
    assert metrics["death_stats"] == {
        "starvation": snapshot["death_starvation"],
        "collision": snapshot["death_collision"],
        "age": snapshot["death_age"],
    }
    assert metrics["trait_usage"] == snapshot["trait_usage"]
    assert all(isinstance(v, int) for v in metrics["trait_usage"].values())
    known = {
        "starvation",
        "overcrowding",
        "environmental",
        "overpopulation",
        "energy_crisis",
        "low_diversity",
        "stagnation",
    }
    assert set(metrics["anomalies"]) <= known
    history = await world_metrics.recent_snapshots(redis_client, settings.engine.snapshot_interval)
    if history[0]["trait_diversity"] < 3 and history[0]["entity_count"] > 50 and metrics["tick"] == history[0]["tick"]:
        assert "low_diversity" in metrics["anomalies"]  # the rules ran over the real snapshots


async def test_latest_snapshot_is_found_without_ws_tick_hints(settings, engine_proc, redis_client):
    """With another snapshot interval than the engine's, the keys are scanned instead."""
    by_tick = await wait_for_snapshots(redis_client, settings, 2)
    scanned = await world_metrics.recent_heads(redis_client, snapshot_interval=7)
    assert scanned and scanned[0].run_id == by_tick[0]["run_id"]
    assert scanned[0].tick >= by_tick[0]["tick"]
    assert [h.tick for h in scanned] == sorted((h.tick for h in scanned), reverse=True)
    assert json.loads(json.dumps([h.key for h in scanned]))  # plain strings
