"""The engine as it runs: ``python -m engine`` with its side tasks (receipts, outboxes, retention,
governed parameters), with and without its journal, side by side.

    python -m bench.engine_process --seconds 60

The other world benchmarks drive the ``Engine`` class; this one starts the process ``make run``
starts, against the services (``make services``), on a Postgres database and a Redis database of
its own (``--database``, created anew and migrated for each arm; ``--redis-db``, flushed)
and a fresh journal directory. The world is the default one, paced at its tick rate, with
``--traits`` live traits (bench/engine.py's, passed by the gatekeeper) recorded active in
Postgres, so that the engine's start-up rebuilds its registry from them and its trait host runs
them, as after a restart of ``make run``; newborns gain them as the world goes. Each arm runs
``--seconds`` after ``--warmup-s``: ``plain`` with the journal off
(``GENESIS_JOURNAL_ENABLED=false``), then ``journaled``. Prints one JSON object with, per arm:

- ``ticks_per_s``, ``ticks``, ``tick_overruns`` (during the measured window), from the engine's
  ``/metrics``;
- ``cpu_ms_per_tick``: the process's CPU (user + system, all threads) per tick, from /proc;
- ``running_traits`` and ``carriers`` (Molbots carrying each trait at the end), and ``host``: the
  trait host's restarts, deadline misses, skipped ticks, lost results and quarantines during the
  run, from the engine's ``/metrics``: all 0 and every trait running, or the run fails;
- for ``journaled``: ``journal_records`` (its head), ``projected_records`` (the audit
  projection's position) and ``projection_lag_records`` at the end: the projection, which the
  worker runs and this bench runs in its own process, must keep up (a lag of more than
  ``--max-lag-s`` seconds of records fails the run);

and ``cpu_ratio`` = journaled / plain CPU per tick. Exits non-zero, saying why, when the engine
process exits, falls below half its tick rate, its trait host is not whole, or its projection
falls behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import insert, make_url, text
from sqlalchemy.ext.asyncio import create_async_engine

from audit import projection
from bench.engine import validated_traits
from cli.processes import ManagedProcess, engine_process, free_port
from genesis import signing
from genesis.config import Settings
from genesis.db.migrate import fresh_database
from genesis.db.models import TraitVersion
from genesis.db.session import get_sessionmaker
from genesis.redis_keys import ENGINE_ENTITIES, ENGINE_STATUS
from journal.reader import JournalReader
from pipeline.registry import RegistryEntry

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The trait host's health in the engine's /metrics: each must not move during a run.
HOST_COUNTERS = {
    "genesis_engine_trait_host_restarts": "restarts",
    "genesis_engine_trait_host_deadline_misses": "deadline_misses",
    "genesis_engine_trait_host_skipped_ticks": "skipped_ticks",
    "genesis_engine_trait_results_lost": "results_lost",
    "genesis_engine_traits_quarantined": "quarantined",
}


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def status(redis) -> dict[str, str]:
    raw = await redis.hgetall(ENGINE_STATUS)
    return {k.decode(): v.decode() for k, v in raw.items()}


async def projected(database_url: str) -> int:
    engine = create_async_engine(database_url)
    async with engine.connect() as conn:
        seq = await conn.scalar(text("SELECT projected_seq FROM audit_projection WHERE id = 1"))
    await engine.dispose()
    return -1 if seq is None else int(seq)


async def record_live(database_url: str, entries: list[RegistryEntry]) -> None:
    """The traits' versions recorded active in Postgres, as activation records them (registered
    outside the pipeline: no mutation rows)."""
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.execute(
            insert(TraitVersion),
            [
                {
                    "trait_name": e.trait_name,
                    "version": e.version,
                    "mutation_id": e.mutation_id,
                    "class_name": e.class_name,
                    "code": e.code,
                    "code_hash": e.code_hash,
                    "file_path": f"bench/{e.trait_name}.py",
                    "status": "active",
                }
                for e in entries
            ],
        )
    await engine.dispose()


async def engine_metrics(metrics_url: str) -> dict[str, float]:
    """The engine's tick, overruns and trait-host counters, read now from its /metrics."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        body = (await client.get(metrics_url)).text
    wanted = {*HOST_COUNTERS, "genesis_engine_tick", "genesis_engine_tick_overruns"}
    found = {
        family.name: family.samples[0].value
        for family in text_string_to_metric_families(body)
        if family.name in wanted and family.samples
    }
    missing = wanted - set(found)
    if missing:
        raise SystemExit(f"the engine's /metrics has no {sorted(missing)}: is its trait host running?")
    return found


async def carriers(redis, names: list[str]) -> dict[str, int]:
    entities = json.loads(await redis.get(ENGINE_ENTITIES) or "[]")
    return {name: sum(name in e["traits"] for e in entities) for name in names}


async def run_arm(
    settings: Settings, name: str, seconds: float, warmup_s: float, traits: list[RegistryEntry]
) -> dict[str, Any]:
    import redis.asyncio as aioredis

    redis = aioredis.from_url(settings.redis_url)
    await redis.flushdb()
    await fresh_database(settings.database_url)
    await record_live(settings.database_url, traits)
    names = sorted(e.trait_name for e in traits)
    metrics_url = f"http://127.0.0.1:{settings.engine.metrics_port}/metrics"
    process: ManagedProcess = engine_process(settings, f"bench-engine-{name}")
    process.start()
    proc = process.proc
    assert proc is not None
    stop = asyncio.Event()
    projecting = None
    if settings.journal.enabled:  # as the worker does, outside the measured process
        keyring = signing.ensure_keyring(settings.receipt_keys_path)
        sessions = get_sessionmaker(settings.database_url)
        projecting = asyncio.create_task(projection.follow(sessions, settings.journal_dir, keyring, stop))
    try:
        deadline = time.monotonic() + 60
        while "tick" not in await status(redis):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the {name} engine did not start; see {process.log_path}")
            await asyncio.sleep(0.2)
        await asyncio.sleep(warmup_s)
        before, cpu_before, t0 = await engine_metrics(metrics_url), cpu_seconds(proc.pid), time.monotonic()
        await asyncio.sleep(seconds)
        after, cpu_after, t1 = await engine_metrics(metrics_url), cpu_seconds(proc.pid), time.monotonic()
        if proc.poll() is not None:
            raise SystemExit(f"the {name} engine exited during the run; see {process.log_path}")
        health = {label: int(after[m] - before[m]) for m, label in HOST_COUNTERS.items()}
        last = await status(redis)
        running = sorted(json.loads(last["active_traits"]))
        if running != names or any(health.values()):
            raise SystemExit(
                f"the {name} engine's trait host was not whole, nothing was measured: "
                f"running {running} of {names}, {health}; see {process.log_path}"
            )
        ticks = int(after["genesis_engine_tick"] - before["genesis_engine_tick"])
        out: dict[str, Any] = {
            "ticks": ticks,
            "ticks_per_s": round(ticks / (t1 - t0), 2),
            "tick_rate": float(last["tick_rate"]),
            "tick_overruns": int(after["genesis_engine_tick_overruns"] - before["genesis_engine_tick_overruns"]),
            "cpu_ms_per_tick": round((cpu_after - cpu_before) * 1000 / max(ticks, 1), 3),
            "population": int(last["population"]),
            "running_traits": running,
            "carriers": await carriers(redis, names),
            "host": health,
        }
        if settings.journal.enabled:
            # the projection runs about once a second: what it has not reached a second later lags
            head = JournalReader(settings.journal_dir / "records").head()
            await asyncio.sleep(1.5)
            out["journal_records"] = head.seq + 1 if head is not None else 0
            out["projected_records"] = await projected(settings.database_url) + 1
            out["projection_lag_records"] = max(0, out["journal_records"] - out["projected_records"])
        return out
    finally:
        stop.set()
        if projecting is not None:
            await projecting
        process.stop()
        await redis.flushdb()
        await redis.aclose()


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    base = Settings()
    database_url = make_url(base.database_url).set(database=args.database).render_as_string(hide_password=False)
    redis_url = base.redis_url.rsplit("/", 1)[0] + f"/{args.redis_db}"
    traits = validated_traits(args.traits)
    arms: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-engine-process-") as tmp:
        for name, journaled in (("plain", False), ("journaled", True)):
            settings = base.override(
                database_url=database_url,
                redis_url=redis_url,
                journal_enabled=journaled,
                journal_dir=Path(tmp) / name,
                receipt_keys_dir=Path(tmp) / "receipt-keys",
                engine_metrics_port=free_port(),
                rounds_enabled=False,
            )
            arms[name] = await run_arm(settings, name, args.seconds, args.warmup_s, traits)
            print(f"# {name} done", file=sys.stderr, flush=True)
    for name, arm in arms.items():
        if arm["ticks_per_s"] < arm["tick_rate"] / 2:
            raise SystemExit(f"the {name} engine ran at {arm['ticks_per_s']} ticks/s of {arm['tick_rate']}: {arm}")
    lag = arms["journaled"]["projection_lag_records"]
    if lag > args.max_lag_s * arms["journaled"]["tick_rate"]:
        raise SystemExit(f"the audit projection fell {lag} records behind the journal: {arms['journaled']}")
    return {
        "seconds": args.seconds,
        **arms,
        "cpu_ratio": round(arms["journaled"]["cpu_ms_per_tick"] / max(arms["plain"]["cpu_ms_per_tick"], 1e-9), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per arm")
    parser.add_argument("--warmup-s", type=float, default=10.0)
    parser.add_argument("--database", default="genesis_bench_engine", help="the bench's own Postgres database")
    parser.add_argument("--redis-db", type=int, default=12)
    parser.add_argument("--traits", type=int, default=3, help="live traits (bench/engine.py's)")
    parser.add_argument("--max-lag-s", type=float, default=5.0, help="most seconds of records the projection may lag")
    print(json.dumps(asyncio.run(measure(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
