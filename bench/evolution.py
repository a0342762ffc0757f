"""Does evolution make the world better, and does selection? Three worlds from one seed.

    python -m bench.evolution --seeds 3 --ticks 50000 [--plot docs/img/evolution.png]

For each seed, three worlds run one after the other under a hard setting (``HARD``: little energy
per food, food that appears slowly, a harsh metabolism), each on a whole Genesis of its own — the
engine with its live trait host, a worker, the Watcher — against a Temporal dev server the bench
starts, a database of its own (``genesis_bench``, made and migrated on first use) and Redis db
``--redis-db``. The evolving arms' worlds run paced at ``--pace`` ticks a second, so that their
verdicts keep up with them; the control's runs in fast-forward:

- ``control``: evolution off (``GENESIS_EVOLUTION_CYCLES_ENABLED=false``): the Watcher watches,
  no cycle runs, no trait is ever proposed;
- ``selection_off``: the built-in operator (``GENESIS_LLM_PROVIDER=builtin``), cycles started by
  the Watcher and by a periodic-improvement schedule every ``--schedule-s`` seconds, every
  proposal through gatekeeper, sandbox test and activation, then kept unjudged
  (``GENESIS_VERDICT_MODE=off``: no verdict, no late rollback);
- ``selection_on``: the same operator and cycles, with selection: each trait's verdict is an
  experiment in forks of the live world (``GENESIS_VERDICT_MODE=experiment``), and the live
  ledger rolls back late what turns harmful.

Both evolving arms keep the world's own housekeeping of the live set: a trait no Molbot carries
for the manifest's ``extinction_ticks`` goes extinct, and ``max_live_traits`` bounds the set (a
trait no Molbot carries has no effect on the world; left in place it would only slow the ticks).

The Watcher's cooldowns are shortened (``--cooldown-s``) because the fast-forwarded world lives
several times faster than real time; the control's setting is otherwise the same.

Each world's WorldSnapshots (every ``SNAPSHOT_INTERVAL`` ticks, all written to Postgres) give
population, mean energy and starvation deaths over time. Per seed one JSON line; the last line is
one JSON object: each arm's means, and for each metric the lead of one arm over another (mean of
the paired differences over the seeds and its 95 % interval, Student's t): ``selection_on`` over
``control`` (``evolving_arm_ahead``), ``selection_off`` over ``control``, and ``selection_on``
over ``selection_off`` (``selection_helps``), each true only when the lead in mean population or
in starvation deaths per 1,000 Molbot-ticks is larger than its interval (the interval excludes
zero in its favour). Per arm also the live-trait count (mean, largest, against
``max_live_traits``) and the mean tick time (first and last quarter of the run, and its slope),
the mutations proposed / kept / rolled back / extinct, the verdicts, the wall time and the plot.

A world that was not whole fails the run (exit 1, saying why): the trait host restarted, ticks
ran without their traits (skipped, or a deadline missed), over ``LOST_SHARE_LIMIT`` of its
trait-ticks were lost, a process
died, snapshots are missing, an evolving arm proposed nothing (it did not measure evolution), or
the live set grew past ``max_live_traits``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families
from scipy import stats as scipy_stats
from temporalio.client import Client

from bench.bench_pipeline import start_temporal
from cli.processes import ManagedProcess, engine_process, free_port, worker_process
from evolution import schedules
from genesis import redis_keys as keys
from genesis.config import PROJECT_ROOT, Settings
from genesis.db.migrate import upgrade_to_head

PG = "genesis:genesis@127.0.0.1:5432"
DATABASE = "genesis_bench"
ARMS = ("control", "selection_off", "selection_on")
EVOLVING = ("selection_off", "selection_on")
VERDICT_MODE = {"control": "window", "selection_off": "off", "selection_on": "experiment"}
# (arm, over arm, its name in the result) — the comparisons the last line prints
COMPARISONS = (
    ("selection_on", "control", "evolving_arm_ahead"),
    ("selection_off", "control", "unselected_arm_ahead"),
    ("selection_on", "selection_off", "selection_helps"),
)
# The hard world: every arm runs it; evolution may not change it (the built-in operator only
# plans new traits, never parameter changes).
# Traits reach Molbots only at birth; births are rare in a hard world, so a newborn gains a live
# trait more often than by default (no effect on the control, which has none).
HARD = {"max_resources": 60, "resource_energy": 20.0, "base_metabolism": 0.08, "trait_gain_chance": 0.6}
SNAPSHOT_INTERVAL = 100
HEALTH_COUNTERS = (
    "genesis_engine_trait_host_restarts",
    "genesis_engine_trait_host_skipped_ticks",
    "genesis_engine_trait_host_deadline_misses",
)
LOST = "genesis_engine_trait_results_lost"
# A paced world's trait sits a tick out while the worker that runs it starts (after a load or an
# unload: an evolving world has many); a fast-forwarded one waits for it. More lost trait-ticks
# than this share of all of them is a world that was not whole.
LOST_SHARE_LIMIT = 0.001
# Each arm's world starts with a journal of its own: its audit projection and receipts go with the last one.
TABLES = (
    "mutations, trait_versions, trait_quarantines, evolution_cycles, world_snapshots, manifests, "
    "audit_events, audit_projection, receipts, receipt_chain_head, policy_decisions"
)


class Unhealthy(RuntimeError):
    """The world measured was not whole: its figures count for nothing."""


def log(message: str) -> None:
    print(f"[bench.evolution] {message}", file=sys.stderr, flush=True)


async def prepare_database() -> str:
    admin = await asyncpg.connect(f"postgresql://{PG}/postgres")
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE):
            await admin.execute(f"CREATE DATABASE {DATABASE}")
    finally:
        await admin.close()
    url = f"postgresql+asyncpg://{PG}/{DATABASE}"
    await asyncio.to_thread(upgrade_to_head, url)
    return url


async def reset(database_url: str, redis: aioredis.Redis, overrides: dict | None = HARD) -> None:
    """A fresh world: no records of an earlier arm, no registry, and ``overrides`` (the hard
    setting unless None) in force from the engine's first tick (it reads them before it starts)."""
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        await conn.execute(f"TRUNCATE {TABLES}")
    finally:
        await conn.close()
    await redis.flushdb()
    if overrides is None:
        return
    record = {"overrides": overrides, "trigger_id": None, "workflow_id": None, "applied_at": time.time()}
    await redis.set(keys.WORLD_PARAMS_OVERRIDES, json.dumps(record))


def arm_settings(base: Settings, arm: str, seed: int, args: argparse.Namespace, mutations_dir: Path) -> Settings:
    evolving = arm in EVOLVING
    return base.override(
        verdict_mode=VERDICT_MODE[arm],
        # The hard world holds few Molbots (tens, not hundreds): a replicate's interval is wide, and
        # a replicate is cheap (a few seconds). The default budget of 9 left most verdicts
        # undecided here; the same budget in both evolving arms.
        verdict_max_replicates=args.verdict_max_replicates,
        task_queue=f"bench-evolution-{seed}-{arm}-{uuid.uuid4().hex[:6]}",
        mutations_dir=mutations_dir,
        journal_dir=mutations_dir / "journal",  # each arm's world starts new
        engine_seed=seed,
        # A fast-forwarded world outruns the verdicts (hundreds of ticks a second against an
        # experiment of tens of seconds), so selection would judge few of its mutations; the
        # evolving arms run paced. The control has nothing to wait for: its world is the same
        # tick for tick at any pace.
        engine_fast_forward=not evolving or args.pace == 0,
        engine_tick_rate=args.pace if evolving and args.pace else base.engine.tick_rate,
        engine_snapshot_interval=SNAPSHOT_INTERVAL,
        engine_postgres_every=1,
        engine_metrics_port=free_port(),
        worker_metrics_port=0,
        evolution_cycles_enabled=evolving,
        llm_provider="builtin" if evolving else "off",
        watcher_cooldown_s=args.cooldown_s,
        watcher_trigger_limit=1000,
        watcher_trigger_window_s=60,
        ratelimit_active_per_agent=10**6,
        schedule_min_interval_s=1.0,
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def engine_status(redis: aioredis.Redis) -> dict[str, str]:
    raw = await redis.hgetall(keys.ENGINE_STATUS)
    return {_text(k): _text(v) for k, v in raw.items()}


async def check_setting(redis: aioredis.Redis, seed: int, arm: str) -> bool:
    """The world runs the hard setting (a Redis db flushed by someone else would lose it)."""
    params = json.loads(await redis.get(keys.ENGINE_PARAMS) or "{}")
    wrong = {name: params.get(name) for name, value in HARD.items() if params.get(name) != value}
    if wrong:
        raise Unhealthy(f"seed {seed} {arm}: the world does not run the hard setting: {wrong}")
    return True


async def engine_counters(port: int) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name.removesuffix("_total")] = sample.value
    return values


async def series(database_url: str, ticks: int) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        return await conn.fetch(
            "SELECT DISTINCT ON (tick) tick, entity_count, avg_energy, death_starvation, "
            "(data->>'live_traits')::int AS live_traits, (data->>'tick_ms')::float AS tick_ms "
            "FROM world_snapshots WHERE tick <= $1 ORDER BY tick",
            ticks,
        )
    finally:
        await conn.close()


async def mutation_counts(database_url: str) -> dict[str, int]:
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        rows = await conn.fetch(
            "SELECT status, fitness_verdict, rollback_reason, verdict_report->>'verdict' AS judged FROM mutations"
        )
        cycles = await conn.fetch("SELECT status FROM evolution_cycles")
    finally:
        await conn.close()
    by_status = Counter(row["status"] for row in rows)
    return {
        "proposed": len(rows),
        "kept": by_status["kept"],
        "rolled_back": by_status["rolled_back"],
        "late_rollbacks": sum(1 for r in rows if (r["rollback_reason"] or "").startswith("late verdict:")),
        "extinct": by_status["extinct"],
        "rejected": by_status["rejected"],
        "failed": by_status["failed"],
        "still_observing": sum(by_status[s] for s in ("activated", "observing", "sandbox_ok", "queued", "validating")),
        "cycles": len(cycles),
        "cycles_succeeded": sum(1 for c in cycles if c["status"] == "succeeded"),
        # the experiment's verdicts, acted on or (selection off) only recorded
        "verdicts": dict(Counter(row["judged"] or row["fitness_verdict"] or "none" for row in rows)),
        "kept_though_negative": sum(1 for r in rows if r["status"] == "kept" and r["judged"] == "negative"),
    }


async def run_arm(
    arm: str, seed: int, args: argparse.Namespace, base: Settings, database_url: str, temporal: Client
) -> dict[str, Any]:
    redis = aioredis.from_url(base.redis_url)
    await reset(database_url, redis)
    with tempfile.TemporaryDirectory(prefix="bench-evolution-") as tmp:
        settings = arm_settings(base, arm, seed, args, Path(tmp))
        prefix = f"bench-evolution-{seed}-{arm}"
        processes = [
            worker_process(settings, f"{prefix}-worker"),
            ManagedProcess(f"{prefix}-watcher", [sys.executable, "-m", "evolution"], settings),
            engine_process(settings, f"{prefix}-engine"),
        ]
        schedule_id = None
        started = time.monotonic()
        try:
            for process in processes:
                process.start()
            if arm in EVOLVING:
                schedule = await schedules.create(
                    temporal, settings.task_queue, interval_s=args.schedule_s, min_interval_s=1.0, note="bench"
                )
                schedule_id = schedule["schedule_id"]
            tick, last_log, checked = 0, 0.0, False
            while tick < args.ticks:
                await asyncio.sleep(0.5)
                for process in processes:
                    if process.proc is not None and process.proc.poll() is not None:
                        raise Unhealthy(f"{process.name} exited with {process.proc.returncode}; see {process.log_path}")
                tick = int((await engine_status(redis)).get("tick", 0))
                if tick and not checked:
                    checked = await check_setting(redis, seed, arm)
                if time.monotonic() - last_log > 15:
                    last_log = time.monotonic()
                    log(f"seed {seed} {arm}: tick {tick}/{args.ticks} after {time.monotonic() - started:.0f} s")
                if time.monotonic() - started > args.arm_timeout_s:
                    raise Unhealthy(f"{arm} reached only tick {tick} of {args.ticks} in {args.arm_timeout_s} s")
            wall_s = time.monotonic() - started
            await check_setting(redis, seed, arm)
            counters = await engine_counters(settings.engine.metrics_port)
        finally:
            if schedule_id is not None:
                await schedules.delete(temporal, schedule_id, settings.task_queue)
            for process in reversed(processes):
                process.stop()
            await redis.aclose()
    rows = await series(database_url, args.ticks)
    return summarise(arm, seed, args, rows, counters, await mutation_counts(database_url), wall_s)


def summarise(
    arm: str,
    seed: int,
    args: argparse.Namespace,
    rows: list[asyncpg.Record],
    counters: dict[str, float],
    mutations: dict[str, int],
    wall_s: float,
) -> dict[str, Any]:
    expected = args.ticks // SNAPSHOT_INTERVAL
    if len(rows) < expected:
        raise Unhealthy(f"seed {seed} {arm}: {len(rows)} snapshots up to tick {args.ticks}, expected {expected}")
    health = {name.removeprefix("genesis_engine_"): int(counters.get(name, 0)) for name in HEALTH_COUNTERS}
    broken = {name: value for name, value in health.items() if value}
    live = [row["live_traits"] or 0 for row in rows]
    lost = int(counters.get(LOST, 0))
    trait_ticks = sum(live) * SNAPSHOT_INTERVAL
    health["trait_results_lost"] = lost
    health["trait_results_lost_share"] = round(lost / trait_ticks, 6) if trait_ticks else 0.0
    if lost > LOST_SHARE_LIMIT * trait_ticks:
        broken["trait_results_lost"] = f"{lost} of {trait_ticks} trait-ticks"
    if broken:
        raise Unhealthy(f"seed {seed} {arm}: the world was not whole: {broken}")
    if arm in EVOLVING and mutations["proposed"] == 0:
        raise Unhealthy(f"seed {seed}: the {arm} arm proposed no mutation: it did not measure evolution")
    if max(live) > args.max_live_traits:
        raise Unhealthy(f"seed {seed} {arm}: {max(live)} live traits, past max_live_traits {args.max_live_traits}")
    population = [row["entity_count"] for row in rows]
    starvation = sum(row["death_starvation"] for row in rows)
    molbot_ticks = sum(population) * SNAPSHOT_INTERVAL
    every = max(1, args.sample_ticks // SNAPSHOT_INTERVAL)
    sampled = rows[every - 1 :: every]
    return {
        "arm": arm,
        "seed": seed,
        "ticks": args.ticks,
        "wall_s": round(wall_s, 1),
        "ticks_per_s": round(args.ticks / wall_s, 1),
        "population_mean": round(statistics.fmean(population), 2),
        "population_final": population[-1],
        "avg_energy_mean": round(statistics.fmean(row["avg_energy"] for row in rows), 2),
        "starvation_deaths": starvation,
        "starvation_per_1k_molbot_ticks": round(1000 * starvation / max(molbot_ticks, 1), 4),
        "mutations": mutations,
        "traits_quarantined": int(counters.get("genesis_engine_traits_quarantined", 0)),
        "live_traits_mean": round(statistics.fmean(live), 1),
        "live_traits_max": max(live),
        "tick_ms": tick_time(rows),
        "live_traits_at_end": int(counters.get("genesis_engine_live_traits", 0)),
        "health": health,
        "series": {
            "tick": [row["tick"] for row in sampled],
            "population": [row["entity_count"] for row in sampled],
            "avg_energy": [round(row["avg_energy"], 2) for row in sampled],
            "starvation_deaths": [row["death_starvation"] for row in sampled],
            "live_traits": [row["live_traits"] for row in sampled],
            "tick_ms": [row["tick_ms"] for row in sampled],
        },
    }


def tick_time(rows: list[asyncpg.Record]) -> dict[str, Any]:
    """The engine's mean tick work over the run: its first and last quarter, and the slope of a
    least-squares line through every snapshot's (ms per 10,000 ticks)."""
    points = [(row["tick"], row["tick_ms"]) for row in rows if row["tick_ms"] is not None]
    if len(points) < 8:
        return {"first_quarter": None, "last_quarter": None, "slope_per_10k_ticks": None}
    quarter = len(points) // 4
    slope = scipy_stats.linregress([t for t, _ in points], [ms for _, ms in points]).slope
    return {
        "first_quarter": round(statistics.fmean(ms for _, ms in points[:quarter]), 3),
        "last_quarter": round(statistics.fmean(ms for _, ms in points[-quarter:]), 3),
        "slope_per_10k_ticks": round(slope * 10_000, 4),
    }


# (metric, +1 when more is better for the leading arm, -1 when less is)
METRICS = (("population_mean", 1), ("avg_energy_mean", 1), ("starvation_per_1k_molbot_ticks", -1))
DECIDING = ("population_mean", "starvation_per_1k_molbot_ticks")


def confidence(differences: list[float]) -> dict[str, Any]:
    """Mean of the paired differences and its 95 % interval (Student's t, n - 1 degrees)."""
    mean = statistics.fmean(differences)
    if len(differences) < 2:
        return {"mean": round(mean, 4), "ci95": None}
    half = scipy_stats.t.ppf(0.975, len(differences) - 1) * statistics.stdev(differences) / math.sqrt(len(differences))
    return {"mean": round(mean, 4), "ci95": [round(mean - half, 4), round(mean + half, 4)]}


def lead(pairs: list[dict[str, Any]], arm: str, over: str) -> dict[str, Any]:
    """``arm``'s lead over ``over`` in each metric, and the deciding metrics it is ahead on."""
    difference, ahead_on = {}, []
    for metric, sign in METRICS:
        result = confidence([p[arm][metric] - p[over][metric] for p in pairs])
        difference[metric] = result
        interval = result["ci95"]
        if metric in DECIDING and interval is not None and (interval[0] > 0 if sign > 0 else interval[1] < 0):
            ahead_on.append(metric)
    return {"difference": difference, "ahead_on": ahead_on}


def overall(pairs: list[dict[str, Any]], args: argparse.Namespace, wall_s: float, plot: str | None) -> dict[str, Any]:
    arms: dict[str, Any] = {}
    for arm in ARMS:
        totals: Counter[str] = Counter()
        verdicts: Counter[str] = Counter()
        for pair in pairs:
            counts = dict(pair[arm]["mutations"])
            verdicts.update(counts.pop("verdicts", {}))
            totals.update(counts)
        arms[arm] = {m: round(statistics.fmean(p[arm][m] for p in pairs), 4) for m, _ in METRICS} | {
            "live_traits_max": max(p[arm]["live_traits_max"] for p in pairs),
            "tick_ms_slope_per_10k_ticks": [p[arm]["tick_ms"]["slope_per_10k_ticks"] for p in pairs],
            "mutations": dict(totals),
            "verdicts": dict(verdicts),
        }
    result: dict[str, Any] = {
        "bench": "evolution",
        "seeds": [p["seed"] for p in pairs],
        "ticks": args.ticks,
        "setting": HARD,
        "max_live_traits": args.max_live_traits,
        "evolving_ticks_per_s": args.pace or "fast-forward",
        "verdict_max_replicates": args.verdict_max_replicates,
        "arms": arms,
    }
    for arm, over, name in COMPARISONS:
        compared = lead(pairs, arm, over)
        result[f"{arm}_vs_{over}"] = compared
        result[name] = bool(compared["ahead_on"])
    return result | {"wall_s": round(wall_s, 1), "plot": plot}


def draw(pairs: list[dict[str, Any]], path: Path) -> None:
    """Population over time, every arm: the mean over the seeds and the range of the seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    labels = {
        "control": "evolution off",
        "selection_off": "built-in operator, selection off",
        "selection_on": "built-in operator, selection on",
    }
    for arm, colour in (("control", "#888888"), ("selection_off", "#ff7f0e"), ("selection_on", "#1f77b4")):
        length = min(len(p[arm]["series"]["tick"]) for p in pairs)
        ticks = pairs[0][arm]["series"]["tick"][:length]
        runs = [p[arm]["series"]["population"][:length] for p in pairs]
        mean = [statistics.fmean(values) for values in zip(*runs)]
        ax.fill_between(ticks, [min(v) for v in zip(*runs)], [max(v) for v in zip(*runs)], color=colour, alpha=0.2)
        ax.plot(ticks, mean, color=colour, linewidth=2, label=f"{labels[arm]}: mean of {len(pairs)} seeds")
    ax.set_xlabel("tick")
    ax.set_ylabel("population (Molbots)")
    ax.set_title("Population in a hard world: evolution off, selection off, selection on (band: seed range)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def finish(pairs: list[dict[str, Any]], args: argparse.Namespace, wall_s: float) -> None:
    """The plot and the last line, over every seed's line."""
    plot = None
    if args.plot:
        path = Path(args.plot)
        draw(pairs, path if path.is_absolute() else PROJECT_ROOT / path)
        plot = str(args.plot)
    print(json.dumps(overall(pairs, args, wall_s, plot)), flush=True)


def summarise_lines(args: argparse.Namespace) -> int:
    """``--summarise FILE``: the last line (and the plot) from the seed lines of earlier runs,
    e.g. seeds run on different machines or a run stopped before its last seed."""
    pairs = [json.loads(line) for line in Path(args.summarise).read_text().splitlines() if line.strip()]
    pairs = [p for p in pairs if all(arm in p for arm in ARMS)]
    if not pairs:
        log(f"FAILED: no seed line with all of {', '.join(ARMS)} in {args.summarise}")
        return 1
    args.ticks = min(p[ARMS[0]]["ticks"] for p in pairs)
    finish(pairs, args, sum(p[arm]["wall_s"] for p in pairs for arm in ARMS))
    return 0


async def main(args: argparse.Namespace) -> int:
    if args.summarise:
        return summarise_lines(args)
    started = time.monotonic()
    database_url = await prepare_database()
    env = await start_temporal()
    base = Settings().override(
        database_url=database_url,
        redis_url=f"redis://127.0.0.1:6379/{args.redis_db}",
        temporal_address=env.client.service_client.config.target_host,
    )
    pairs: list[dict[str, Any]] = []
    try:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            pair: dict[str, Any] = {"seed": seed}
            for arm in ARMS:
                log(f"seed {seed}: {arm} arm, {args.ticks} ticks")
                pair[arm] = await run_arm(arm, seed, args, base, database_url, env.client)
            for arm, over, _ in COMPARISONS:
                pair[f"{arm}_vs_{over}"] = {m: round(pair[arm][m] - pair[over][m], 4) for m, _ in METRICS}
            pairs.append(pair)
            print(json.dumps(pair), flush=True)
    except Unhealthy as exc:
        log(f"FAILED: {exc}")
        return 1
    finally:
        await env.shutdown()
    finish(pairs, args, time.monotonic() - started)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.evolution", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds to run (first-seed, first-seed+1, ...)")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--ticks", type=int, default=50000, help="ticks each world runs")
    parser.add_argument(
        "--pace",
        type=float,
        default=100.0,
        help="ticks per second of the evolving arms' worlds, so verdicts keep up (0: fast-forward)",
    )
    parser.add_argument(
        "--verdict-max-replicates",
        type=int,
        default=21,
        help="the verdicts' replicate budget (GENESIS_VERDICT_MAX_REPLICATES) in the evolving arms",
    )
    parser.add_argument("--schedule-s", type=float, default=2.0, help="periodic improvement every this many seconds")
    parser.add_argument("--cooldown-s", type=float, default=2.0, help="the Watcher's cooldown per anomaly type")
    parser.add_argument("--sample-ticks", type=int, default=500, help="ticks between two points of a printed series")
    parser.add_argument("--plot", default="docs/img/evolution.png", help="PNG of population over time ('' : none)")
    parser.add_argument("--redis-db", type=int, default=14, help="flushed by the run (the benches' db)")
    parser.add_argument("--arm-timeout-s", type=float, default=3600.0, help="an arm slower than this fails")
    parser.add_argument(
        "--summarise", metavar="FILE", help="the last line and plot from the seed lines in FILE (runs nothing)"
    )
    parser.add_argument(
        "--max-live-traits", type=int, default=40, help="the manifest's bound (its default): a live set past it fails"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
