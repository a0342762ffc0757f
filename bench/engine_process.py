"""The engine as it runs: ``python -m engine`` with its side tasks (the audit projection, receipts,
outboxes, governed parameters), with and without its journal, side by side.

    python -m bench.engine_process --seconds 60

The other world benchmarks drive the ``Engine`` class; this one starts the process ``make run``
starts, against the services (``make services``), on a Postgres database and a Redis database of
its own (``--database``, created anew and migrated for each arm; ``--redis-db``, flushed)
and a fresh journal directory. The world is the default one, paced at its tick rate, with no live
trait. Each arm runs ``--seconds`` after ``--warmup-s``: ``plain`` with the journal off
(``GENESIS_JOURNAL_ENABLED=false``), then ``journaled``. Prints one JSON object with, per arm:

- ``ticks_per_s``, ``ticks``, ``tick_overruns`` (during the measured window), from the engine's
  status in Redis;
- ``cpu_ms_per_tick``: the process's CPU (user + system, all threads) per tick, from /proc;
- for ``journaled``: ``journal_records`` (its head), ``projected_records`` (the audit
  projection's position) and ``projection_lag_records`` at the end: the projection must keep up
  (a lag of more than ``--max-lag-s`` seconds of records fails the run);

and ``cpu_ratio`` = journaled / plain CPU per tick. Exits non-zero, saying why, when the engine
process exits, falls below half its tick rate, or its projection falls behind.
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

from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import create_async_engine

from genesis.cli.processes import ManagedProcess, engine_process
from genesis.config import Settings
from genesis.db.migrate import fresh_database
from genesis.redis_keys import ENGINE_STATUS
from journal.reader import JournalReader

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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


async def run_arm(settings: Settings, name: str, seconds: float, warmup_s: float) -> dict[str, Any]:
    import redis.asyncio as aioredis

    redis = aioredis.from_url(settings.redis_url)
    await redis.flushdb()
    await fresh_database(settings.database_url)
    process: ManagedProcess = engine_process(settings, f"bench-engine-{name}")
    process.start()
    proc = process.proc
    assert proc is not None
    try:
        deadline = time.monotonic() + 60
        while "tick" not in await status(redis):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the {name} engine did not start; see {process.log_path}")
            await asyncio.sleep(0.2)
        await asyncio.sleep(warmup_s)
        before, cpu_before, t0 = await status(redis), cpu_seconds(proc.pid), time.monotonic()
        await asyncio.sleep(seconds)
        after, cpu_after, t1 = await status(redis), cpu_seconds(proc.pid), time.monotonic()
        if proc.poll() is not None:
            raise SystemExit(f"the {name} engine exited during the run; see {process.log_path}")
        ticks = int(after["tick"]) - int(before["tick"])
        out: dict[str, Any] = {
            "ticks": ticks,
            "ticks_per_s": round(ticks / (t1 - t0), 2),
            "tick_rate": float(after["tick_rate"]),
            "tick_overruns": int(after["tick_overruns"]) - int(before["tick_overruns"]),
            "cpu_ms_per_tick": round((cpu_after - cpu_before) * 1000 / max(ticks, 1), 3),
            "population": int(after["population"]),
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
        process.stop()
        await redis.flushdb()
        await redis.aclose()


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    base = Settings()
    database_url = make_url(base.database_url).set(database=args.database).render_as_string(hide_password=False)
    redis_url = base.redis_url.rsplit("/", 1)[0] + f"/{args.redis_db}"
    arms: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-engine-process-") as tmp:
        for name, journaled in (("plain", False), ("journaled", True)):
            settings = base.override(
                database_url=database_url,
                redis_url=redis_url,
                journal_enabled=journaled,
                journal_dir=Path(tmp) / name,
                receipt_keys_dir=Path(tmp) / "receipt-keys",
                engine_metrics_port=0,
                rounds_enabled=False,
            )
            arms[name] = await run_arm(settings, name, args.seconds, args.warmup_s)
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
    parser.add_argument("--max-lag-s", type=float, default=5.0, help="most seconds of records the projection may lag")
    print(json.dumps(asyncio.run(measure(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
