"""The world as an agent sees it: recent WorldSnapshots read back from Redis, the Watcher's
anomaly rules (logic-flow.md 2.3) over them, and the ``GET /api/agents/context/metrics``
document (open-mutation-api.md).

The rules are pure functions of the snapshots, so the Watcher can use them as they are."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import redis.asyncio as aioredis

from genesis import redis_keys as keys

log = logging.getLogger("genesis.world_metrics")

# logic-flow.md 2.3
ANOMALY_DEATH_THRESHOLD = 0.30
CRITICAL_DEATH_RATE = 0.50  # 2.4: "50%+ death rate, near-extinction"
# Rule 2 compares the population with the cap at which births stop (max_population): the seed's
# 2x the cap can never be reached, so "far above capacity" is read as pressing on it, 90 % and growing.
ANOMALY_OVERPOP = 0.9
ENERGY_CRISIS_LEVEL = 20.0
ENERGY_CRISIS_TREND = -5.0
LOW_DIVERSITY_TRAITS = 3
LOW_DIVERSITY_MIN_POPULATION = 50
STAGNATION_SNAPSHOTS = 5
STAGNATION_MAX_CHANGE = 0.02
STAGNATION_QUIET_S = 600.0  # no mutation applied for 10 minutes
HISTORY_DEPTH = STAGNATION_SNAPSHOTS  # WATCHER_HISTORY_DEPTH

# Mass-extinction type by the period's leading cause of death.
EXTINCTION_TYPE = {"starvation": "starvation", "collision": "overcrowding", "age": "environmental"}
DEATH_CAUSES = ("starvation", "collision", "age")
SEVERITY_ORDER = {"low": 0, "medium": 1, "high": 2, "critical": 3}

_INT_FIELDS = (
    "tick",
    "entity_count",
    "births_last_period",
    "deaths_last_period",
    "death_starvation",
    "death_age",
    "death_collision",
    "trait_diversity",
    "resource_count",
    "tick_overruns",
)
_FLOAT_FIELDS = ("timestamp", "avg_energy", "resource_density", "temperature", "ticks_per_second")
_JSON_FIELDS = ("trait_usage", "trait_stats")


@dataclass(frozen=True)
class Anomaly:
    type: str
    severity: str  # low | medium | high | critical
    area: str  # traits | physics | environment


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_snapshot(raw: Mapping[Any, Any]) -> dict[str, Any]:
    """A ``ws:snapshot:{tick}`` hash (strings) with typed values; unparsable fields are left out."""
    snap: dict[str, Any] = {_text(k): _text(v) for k, v in raw.items()}
    for name in _INT_FIELDS:
        if name in snap:
            try:
                snap[name] = int(float(snap[name]))
            except ValueError:
                del snap[name]
    for name in _FLOAT_FIELDS:
        if name in snap:
            try:
                snap[name] = float(snap[name])
            except ValueError:
                del snap[name]
    for name in _JSON_FIELDS:
        try:
            snap[name] = json.loads(snap[name]) if snap.get(name) else {}
        except ValueError:
            snap[name] = {}
    return snap


@dataclass(frozen=True)
class SnapshotHead:
    key: str
    tick: int
    timestamp: float
    run_id: str


async def recent_heads(redis: aioredis.Redis, snapshot_interval: int, depth: int = HISTORY_DEPTH) -> list[SnapshotHead]:
    """Up to ``depth`` snapshots of the engine's current run, newest first ([] when there is none).

    Snapshot ticks are multiples of the interval, so the newest is found from ``ws:tick`` without
    scanning; if that finds nothing (another interval, or no ``ws:tick``), the keys are scanned."""
    tick_raw = await redis.get(keys.WORLD_TICK)
    candidates: list[str] = []
    if tick_raw is not None:
        try:
            tick = int(_text(tick_raw))
        except ValueError:
            tick = -1
        if tick >= 0:
            base = tick - tick % snapshot_interval
            lowest = max(base - (depth + 1) * snapshot_interval, -1)
            candidates = [keys.world_snapshot(t) for t in range(base, lowest, -snapshot_interval)]
    heads = await _heads(redis, candidates)
    if not heads:
        scanned = [_text(k) async for k in redis.scan_iter(match=keys.WORLD_SNAPSHOT_MATCH, count=1000)]
        heads = await _heads(redis, scanned)
    if not heads:
        return []
    newest = max(heads, key=lambda h: (h.timestamp, h.tick))
    same_run = [h for h in heads if h.run_id == newest.run_id]
    return sorted(same_run, key=lambda h: h.tick, reverse=True)[:depth]


async def load_snapshots(redis: aioredis.Redis, heads: Sequence[SnapshotHead]) -> list[dict[str, Any]]:
    """The snapshots of ``heads`` (in that order; one that expired meanwhile is left out)."""
    async with redis.pipeline(transaction=False) as pipe:
        for head in heads:
            pipe.hgetall(head.key)
        raws = await pipe.execute()
    return [parse_snapshot(raw) for raw in raws if raw]


async def recent_snapshots(
    redis: aioredis.Redis, snapshot_interval: int, depth: int = HISTORY_DEPTH
) -> list[dict[str, Any]]:
    """Up to ``depth`` snapshots of the current run, newest first."""
    return await load_snapshots(redis, await recent_heads(redis, snapshot_interval, depth))


async def _heads(redis: aioredis.Redis, snapshot_keys: Sequence[str]) -> list[SnapshotHead]:
    """The head of each of ``snapshot_keys`` that exists."""
    if not snapshot_keys:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for key in snapshot_keys:
            pipe.hmget(key, "tick", "timestamp", "run_id")
        rows = await pipe.execute()
    heads = []
    for key, (tick, timestamp, run_id) in zip(snapshot_keys, rows):
        if tick is None:
            continue
        try:
            heads.append(SnapshotHead(key, int(_text(tick)), float(_text(timestamp or 0)), _text(run_id or "")))
        except ValueError:
            continue
    return heads


def _relative_spread(values: Sequence[float]) -> float:
    scale = max(abs(sum(values) / len(values)), 1e-9)
    return (max(values) - min(values)) / scale


def stagnating(history: Sequence[Mapping[str, Any]]) -> bool:
    """Rule 5's first half: the last 5 snapshots change by under 2% in every metric."""
    if len(history) < STAGNATION_SNAPSHOTS:
        return False
    recent = history[:STAGNATION_SNAPSHOTS]
    for metric in ("entity_count", "avg_energy", "resource_density", "trait_diversity"):
        values = [float(s.get(metric, 0) or 0) for s in recent]
        if any(values) and _relative_spread(values) >= STAGNATION_MAX_CHANGE:
            return False
    return True


def detect_anomalies(
    history: Sequence[Mapping[str, Any]],
    *,
    max_entities: int,
    mutation_applied_recently: bool = False,
) -> list[Anomaly]:
    """The five rules of logic-flow.md 2.3 over ``history`` (newest first). Trends need two
    snapshots: with fewer there is no anomaly. Stagnation also needs five snapshots and no
    mutation applied in the last 10 minutes (pass ``mutation_applied_recently=True`` when that
    is not known, to stay silent)."""
    if len(history) < 2:
        return []
    curr, prev = history[0], history[1]
    n = int(curr.get("entity_count", 0))
    population_change = (n - int(prev.get("entity_count", 0))) / max(int(prev.get("entity_count", 0)), 1)
    energy_trend = float(curr.get("avg_energy", 0.0)) - float(prev.get("avg_energy", 0.0))
    death_rate = int(curr.get("deaths_last_period", 0)) / max(n, 1)
    birth_rate = int(curr.get("births_last_period", 0)) / max(n, 1)
    found: list[Anomaly] = []
    if death_rate > ANOMALY_DEATH_THRESHOLD and population_change < -0.10:
        leading = max(DEATH_CAUSES, key=lambda c: int(curr.get(f"death_{c}", 0)))
        severity = "critical" if death_rate > CRITICAL_DEATH_RATE else "high"
        found.append(Anomaly(EXTINCTION_TYPE[leading], severity, "traits"))
    if n > max_entities * ANOMALY_OVERPOP and birth_rate > death_rate * 2:
        found.append(Anomaly("overpopulation", "medium", "physics"))
    if float(curr.get("avg_energy", 0.0)) < ENERGY_CRISIS_LEVEL and energy_trend < ENERGY_CRISIS_TREND:
        found.append(Anomaly("energy_crisis", "high", "traits"))
    if int(curr.get("trait_diversity", 0)) < LOW_DIVERSITY_TRAITS and n > LOW_DIVERSITY_MIN_POPULATION:
        found.append(Anomaly("low_diversity", "medium", "traits"))
    if not mutation_applied_recently and stagnating(history):
        found.append(Anomaly("stagnation", "low", "environment"))
    return found


async def mutation_applied_since(sessions: Any, since: float) -> bool:
    """Whether any mutation went live after ``since`` (unix seconds), for rule 5. True when
    Postgres cannot tell (the stagnation rule then stays silent)."""
    from datetime import datetime

    from sqlalchemy import func, select

    from genesis.db.models import Mutation

    try:
        async with sessions() as session:
            latest = await session.scalar(select(func.max(Mutation.activated_at)))
    except Exception as exc:  # Postgres down
        log.warning("could not read the last activation time (%s: %s)", type(exc).__name__, exc)
        return True
    return latest is not None and latest > datetime.fromtimestamp(since, UTC)


def metrics_document(latest: Mapping[str, Any], anomalies: Sequence[Anomaly]) -> dict[str, Any]:
    """``GET /api/agents/context/metrics`` (seed shape). ``death_stats`` counts the deaths by
    cause since the previous snapshot; ``anomalies`` are the types found, most severe first."""
    ordered = sorted(anomalies, key=lambda a: SEVERITY_ORDER.get(a.severity, 0), reverse=True)
    types: list[str] = []
    for anomaly in ordered:
        if anomaly.type not in types:
            types.append(anomaly.type)
    return {
        "tick": int(latest.get("tick", 0)),
        "entity_count": int(latest.get("entity_count", 0)),
        "avg_energy": float(latest.get("avg_energy", 0.0)),
        "resource_count": int(latest.get("resource_count", 0)),
        "death_stats": {cause: int(latest.get(f"death_{cause}", 0)) for cause in DEATH_CAUSES},
        "trait_usage": {str(k): int(v) for k, v in dict(latest.get("trait_usage") or {}).items()},
        "anomalies": types,
    }
