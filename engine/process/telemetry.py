"""Telemetry of the engine (logic-flow.md, section 1): WorldSnapshots, viewer frames and the
per-second status, and the sink that writes them to Redis and Postgres.

Building a snapshot or a frame is pure and runs inside the tick (in-memory data only). Writing
is never awaited by the tick loop: :class:`TelemetrySink` queues the work for a background
writer task; Redis or Postgres being slow or down is logged, counted and retried later
(with a backoff), and never stalls or crashes the loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis

from engine.core.world import DEATH_CAUSES, World
from genesis import redis_keys as keys
from genesis.redis_keys import Channels

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger("genesis.engine.telemetry")

# The fields of the seed's WorldSnapshot, then Genesis' additions.
SEED_FIELDS = (
    "tick",
    "timestamp",
    "entity_count",
    "avg_energy",
    "births_last_period",
    "deaths_last_period",
    "death_starvation",
    "death_age",
    "death_collision",
    "resource_density",
    "trait_diversity",
    "dominant_trait",
    "temperature",
)
EXTRA_FIELDS = (
    "state_hash",
    "resource_count",
    "trait_usage",
    "trait_stats",
    "tick_overruns",
    "ticks_per_second",
    "run_id",
)
SNAPSHOT_FIELDS = SEED_FIELDS + EXTRA_FIELDS
JSON_FIELDS = ("trait_usage", "trait_stats")

WRITE_TIMEOUT_S = 5.0
POSTGRES_TIMEOUT_S = 15.0
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 10.0
QUEUE_SIZE = 32
SNAPSHOT_RETENTION = "7 days"  # logic-flow.md 1.4: world_snapshots rows are kept 7 days


class PeriodCounters:
    """Cumulative world counters at the previous snapshot, to report per-period deltas."""

    def __init__(self, stats: Mapping[str, Any] | None = None) -> None:
        self.births = int(stats["births"]) if stats else 0
        self.deaths = dict(stats["deaths"]) if stats else {c: 0 for c in DEATH_CAUSES}


def dominant(usage: Mapping[str, int]) -> str | None:
    """The most carried trait (ties: the alphabetically first), or None."""
    best = None
    for name in sorted(usage):
        if best is None or usage[name] > usage[best]:
            best = name
    return best


def build_snapshot(
    world: World,
    previous: PeriodCounters,
    *,
    timestamp: float,
    tick_overruns: int,
    ticks_per_second: float,
    run_id: str,
) -> tuple[dict[str, Any], PeriodCounters]:
    """The WorldSnapshot of ``world`` now (typed values) and the counters for the next period.

    ``births_last_period``, ``deaths_last_period`` and ``death_*`` count the events since the
    previous snapshot (so ``death_starvation + death_age + death_collision ==
    deaths_last_period``); ``trait_stats`` holds cumulative per-trait counters."""
    st = world.stats()
    deaths = st["deaths"]
    period = {c: deaths[c] - previous.deaths.get(c, 0) for c in DEATH_CAUSES}
    usage = st["trait_usage"]
    snap = {
        "tick": st["tick"],
        "timestamp": round(timestamp, 3),
        "entity_count": st["population"],
        "avg_energy": round(st["avg_energy"], 4),
        "births_last_period": st["births"] - previous.births,
        "deaths_last_period": sum(period.values()),
        "death_starvation": period["starvation"],
        "death_age": period["age"],
        "death_collision": period["collision"],
        "resource_density": round(st["resource_density"], 4),
        "trait_diversity": len(usage),
        "dominant_trait": dominant(usage),
        "temperature": world.params.temperature,
        "state_hash": world.state_hash(),
        "resource_count": st["resource_count"],
        "trait_usage": usage,
        "trait_stats": {name: {**s, "avg_energy": round(s["avg_energy"], 4)} for name, s in st["trait_stats"].items()},
        "tick_overruns": tick_overruns,
        "ticks_per_second": round(ticks_per_second, 2),
        "run_id": run_id,
    }
    return snap, PeriodCounters(st)


def to_redis_hash(snap: Mapping[str, Any]) -> dict[str, str]:
    """Flat string values: JSON for nested values, "" for a missing dominant trait."""
    out: dict[str, str] = {}
    for name, value in snap.items():
        if name in JSON_FIELDS or isinstance(value, (dict, list)):
            out[name] = json.dumps(value, separators=(",", ":"))
        elif value is None:
            out[name] = ""
        else:
            out[name] = str(value)
    return out


def to_row(snap: Mapping[str, Any]) -> dict[str, Any]:
    """The world_snapshots row of a snapshot (columns + the whole snapshot as ``data``)."""
    columns = (
        "run_id",
        "tick",
        "timestamp",
        "entity_count",
        "avg_energy",
        "births_last_period",
        "deaths_last_period",
        "death_starvation",
        "death_age",
        "death_collision",
        "resource_density",
        "resource_count",
        "trait_diversity",
        "dominant_trait",
        "temperature",
        "tick_overruns",
        "ticks_per_second",
        "state_hash",
    )
    row = {c: snap[c] for c in columns}
    row["data"] = dict(snap)
    return row


def build_frame(world: World) -> str:
    """A compact viewer frame (JSON): ``{"tick", "traits": [name, ...], "entities": [[id, x, y,
    energy, trait|null, [trait index, ...]]], "resources": [[x, y]]}``. The fifth field is the
    entity's newest trait (the one its dot is coloured by); the sixth every trait it carries, as
    indices into ``traits``, so a viewer counts and shows the carriers of any trait."""
    index: dict[str, int] = {}
    ents = []
    for e in world.entities.values():
        carried = [index.setdefault(name, len(index)) for name in e.traits]
        ents.append(
            [e.id, round(e.x, 1), round(e.y, 1), round(e.energy, 1), e.traits[-1] if e.traits else None, carried]
        )
    res = [[round(r.x, 1), round(r.y, 1)] for r in world.resources.values()]
    frame = {"tick": world.tick, "traits": list(index), "entities": ents, "resources": res}
    return json.dumps(frame, separators=(",", ":"))


def entity_list(world: World, limit: int) -> list[dict[str, Any]]:
    """At most ``limit`` entities, lowest ids first, for GET /api/world/entities."""
    ents = world.entities
    out = []
    for eid in sorted(ents)[:limit]:
        e = ents[eid]
        out.append(
            {
                "id": e.id,
                "x": round(e.x, 2),
                "y": round(e.y, 2),
                "energy": round(e.energy, 2),
                "max_energy": e.max_energy,
                "age": e.age,
                "traits": list(e.traits),
                "generation": e.generation,
            }
        )
    return out


class TelemetrySink:
    """Writes telemetry off the tick path; every failure is counted, logged and survived."""

    def __init__(self, redis_url: str, database_url: str | None = None) -> None:
        self.redis = aioredis.from_url(
            redis_url,
            socket_timeout=WRITE_TIMEOUT_S,
            socket_connect_timeout=2,
        )
        self.database_url = database_url
        self._pg: AsyncEngine | None = None  # created on the first insert (SQLAlchemy imported then)
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(maxsize=QUEUE_SIZE)
        self._writer: asyncio.Task | None = None
        self._frame_task: asyncio.Task | None = None
        self._pg_tasks: set[asyncio.Task] = set()
        self._down_until = 0.0
        self._backoff = BACKOFF_MIN_S
        self.redis_up = True
        self.frame_subscribers = 0
        self.counters = {
            "snapshots_written": 0,
            "status_written": 0,
            "frames_published": 0,
            "frames_skipped": 0,
            "postgres_rows": 0,
            "redis_errors": 0,
            "postgres_errors": 0,
            "dropped": 0,
        }

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_loop(), name="telemetry-writer")

    async def flush(self, timeout: float = 30.0) -> None:
        """Wait until everything submitted so far was written (or given up on)."""

        async def _all() -> None:
            await self._queue.join()
            pending = list(self._pg_tasks) + ([self._frame_task] if self._frame_task else [])
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

        await asyncio.wait_for(_all(), timeout)

    async def close(self) -> None:
        try:
            await self.flush(timeout=5.0)
        except (TimeoutError, Exception):
            pass
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        await self.redis.aclose()
        if self._pg is not None:
            await self._pg.dispose()

    # -- submitting (non-blocking; called from the loop) --------------------------------------

    def submit_snapshot(self, snap: Mapping[str, Any]) -> None:
        self._submit("snapshot", snap)

    def submit_status(self, status: Mapping[str, str], params_json: str, entities_json: str) -> None:
        self._submit("status", (status, params_json, entities_json))

    def _submit(self, kind: str, payload: Any) -> None:
        try:
            self._queue.put_nowait((kind, payload))
        except asyncio.QueueFull:
            self.counters["dropped"] += 1

    def publish_frame(self, frame: str) -> None:
        """Fire and forget; skipped while the previous frame is in flight or Redis is down."""
        if time.monotonic() < self._down_until or (self._frame_task and not self._frame_task.done()):
            self.counters["frames_skipped"] += 1
            return
        self._frame_task = asyncio.create_task(self._publish_frame(frame))

    def persist(self, row: Mapping[str, Any]) -> None:
        """INSERT a world_snapshots row in a background task (never awaited by the loop)."""
        if not self.database_url:
            return
        task = asyncio.create_task(self._insert(row))
        self._pg_tasks.add(task)
        task.add_done_callback(self._pg_tasks.discard)

    # -- writing --------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            kind, payload = await self._queue.get()
            try:
                if time.monotonic() < self._down_until:
                    self.counters["dropped"] += 1
                    continue
                if kind == "snapshot":
                    await asyncio.wait_for(self._write_snapshot(payload), WRITE_TIMEOUT_S)
                    self.counters["snapshots_written"] += 1
                else:
                    await asyncio.wait_for(self._write_status(*payload), WRITE_TIMEOUT_S)
                    self.counters["status_written"] += 1
                self._redis_ok()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._redis_failed(exc)
                self.counters["dropped"] += 1
            finally:
                self._queue.task_done()

    def _redis_ok(self) -> None:
        if not self.redis_up:
            log.info("redis is reachable again; telemetry resumed")
        self.redis_up = True
        self._backoff = BACKOFF_MIN_S

    def _redis_failed(self, exc: BaseException) -> None:
        self.counters["redis_errors"] += 1
        if self.redis_up:
            log.warning("redis write failed (%s: %s); telemetry paused, retrying with backoff", type(exc).__name__, exc)
        self.redis_up = False
        self._down_until = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2.0, BACKOFF_MAX_S)

    async def _write_snapshot(self, snap: Mapping[str, Any]) -> None:
        tick = int(snap["tick"])
        key = keys.world_snapshot(tick)
        async with self.redis.pipeline(transaction=True) as pipe:
            # redis' stubs type `mapping` as Mapping[FieldT, ...]: its invariant key refuses dict[str, str]
            pipe.hset(key, mapping=to_redis_hash(snap))  # type: ignore[arg-type]
            pipe.expire(key, keys.WORLD_SNAPSHOT_TTL_S)
            pipe.set(keys.WORLD_TICK, tick)
            await pipe.execute()
        event = json.dumps({"tick": tick, "snapshot_key": key}, separators=(",", ":"))
        await self.redis.publish(Channels.TELEMETRY, event)

    async def _write_status(self, status: Mapping[str, str], params_json: str, entities_json: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(keys.WORLD_TICK, status["tick"])
            # redis' stubs type `mapping` as Mapping[FieldT, ...]: its invariant key refuses dict[str, str]
            pipe.hset(keys.ENGINE_STATUS, mapping=dict(status))  # type: ignore[arg-type]
            pipe.set(keys.ENGINE_PARAMS, params_json)
            pipe.set(keys.ENGINE_ENTITIES, entities_json)
            pipe.pubsub_numsub(Channels.WORLD_FRAMES)
            results = await pipe.execute()
        numsub = results[-1]
        self.frame_subscribers = int(numsub[0][1]) if numsub else 0

    async def _publish_frame(self, frame: str) -> None:
        try:
            receivers = await asyncio.wait_for(self.redis.publish(Channels.WORLD_FRAMES, frame), WRITE_TIMEOUT_S)
            self.counters["frames_published"] += 1
            if receivers == 0:
                self.frame_subscribers = 0  # nobody listens: stop building frames until status says so
        except Exception as exc:
            self._redis_failed(exc)

    async def _insert(self, row: Mapping[str, Any]) -> None:
        if not self.database_url:
            return
        from sqlalchemy import delete, insert, text
        from sqlalchemy.ext.asyncio import create_async_engine

        from genesis.db.models import WorldSnapshot

        try:
            if self._pg is None:
                self._pg = create_async_engine(
                    self.database_url,
                    pool_size=1,
                    max_overflow=1,
                    pool_pre_ping=True,
                    connect_args={"timeout": 5},
                )
            pg = self._pg

            async def _do() -> None:
                async with pg.begin() as conn:
                    await conn.execute(insert(WorldSnapshot).values(**row))
                    await conn.execute(
                        delete(WorldSnapshot).where(
                            WorldSnapshot.created_at < text(f"now() - interval '{SNAPSHOT_RETENTION}'")
                        )
                    )

            await asyncio.wait_for(_do(), POSTGRES_TIMEOUT_S)
            self.counters["postgres_rows"] += 1
        except Exception as exc:
            self.counters["postgres_errors"] += 1
            log.warning("postgres snapshot insert failed at tick %s (%s: %s)", row.get("tick"), type(exc).__name__, exc)
