"""Does the judge see? Traits of known effect proposed through the whole pipeline, and their verdicts.

    python -m bench.verdicts [--each 3] [--busy-traits 60] [--worlds fresh,busy]

Three kinds of trait whose effect is known by construction, ``--each`` of each (each a variant
with its own constants, so none is a duplicate of another):

- ``harmful``: its carriers burn energy at the highest rate and speed the Entity API allows and
  run *away* from food (they starve within a few hundred ticks);
- ``helpful``: a careful forager: when hungry it walks to food within reach and eats it (food
  further away it leaves to instinct, so its carriers do not crowd and collide);
- ``neutral``: writes a label into its carriers' state and nothing else.

Each world is a whole Genesis of its own (a Temporal dev server the bench starts, a worker, the
engine paced at its tick rate with its live trait host, the API; the database ``genesis_bench``
and Redis db ``--redis-db``, both emptied first): ``fresh`` (the default world, no live trait)
and ``busy`` (first ``--busy-traits`` benign traits of 20 agents, wanderers and the soak's
stateful kind, none of them a forager, are proposed through an API of their own whose verdicts
read the window, so the bench does not wait for 60 experiments, and go live). The
planted traits are then proposed one of each kind at a time, as a user would, and each is
followed to its end (kept or rolled back, or rejected); a round's kept traits are then rolled
back, so that every round is judged beside the same live traits.

Prints one JSON object: for each world the confusion matrix (truth -> verdict -> count), the
rolled-back share of each kind, time to verdict (p50, p95, from the proposal) and to activation
(p50), the live world's ticks per second meanwhile (p50 and the slowest of its 5-second windows
while verdicts were pending) and its ticks that overran their period, alone (``--baseline-s``
before the first proposal) and while the verdicts ran, and the verdicts' reasons; and the same
over all worlds. Fails (exit 1, saying why) when the world was not whole: the trait host
restarted or skipped ticks, a process died, or a planted trait never reached a verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

from bench.bench_pipeline import bench_settings, start_temporal
from bench.evolution import engine_counters, engine_status, prepare_database, reset
from bench.soak import STATEFUL
from cli.processes import api_process, engine_process, free_port, wait_for_api, worker_process
from genesis import entity_api
from genesis.db.session import get_engine
from governance.records import manifests

TERMINAL = ("kept", "rolled_back", "rejected", "failed")
HEALTH = ("genesis_engine_trait_host_restarts", "genesis_engine_trait_host_skipped_ticks")
TRUTHS = ("harmful", "helpful", "neutral")
VERDICTS = ("positive", "negative", "neutral", "inconclusive", None)

_RATE_MAX = entity_api.WRITABLE_ATTRS["energy_consumption_rate"][2]
_SPEED_MAX = entity_api.WRITABLE_ATTRS["speed"][2]

# The busy world's traits wander and pace themselves; none walks to food. (The soak's stateless
# kind does: once it spreads through births, a planted forager is redundant there and judged
# neutral, rightly, and the "helpful" truth no longer holds in that world.)
WANDERER = """import math

class BaseTrait:
    pass

class Wanderer{k}(BaseTrait):
    async def execute(self, entity) -> None:
        entity.direction = entity.direction + math.sin(entity.age * 0.05 + {k}) * 0.2
"""

PLANTED = {
    "harmful": f"""class BaseTrait:
    pass


class Reckless{{k}}(BaseTrait):
    async def execute(self, entity) -> None:
        entity.energy_consumption_rate = {_RATE_MAX}
        entity.speed = {_SPEED_MAX}
        found = entity.nearest_resource()
        if found is not None:
            entity.move(-found[0] - 0.{{k}}, -found[1])
""",
    "helpful": """class BaseTrait:
    pass


class CarefulForager{k}(BaseTrait):
    async def execute(self, entity) -> None:
        if entity.energy < 50.0 + 0.{k}:
            found = entity.nearest_resource()
            if found is not None and found[2] < 30.0:
                entity.move_towards(entity.x + found[0], entity.y + found[1])
                entity.eat()
""",
    "neutral": """class BaseTrait:
    pass


class Label{k}(BaseTrait):
    async def execute(self, entity) -> None:
        entity.state = "label {k}"
""",
}


def log(message: str) -> None:
    print(f"[bench.verdicts] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))], 2)


async def propose(http: httpx.AsyncClient, name: str, code: str, agent: str) -> str:
    response = await http.post(
        "/api/mutations/propose", json={"trait_name": name, "code": code, "agent_id": agent, "goal": "bench.verdicts"}
    )
    if response.status_code != 202:
        raise SystemExit(f"bench.verdicts: proposing {name} failed: {response.status_code} {response.text[:300]}")
    return response.json()["mutation_id"]


async def follow(http: httpx.AsyncClient, mutation_id: str, until: tuple[str, ...], timeout_s: float) -> dict:
    """The mutation's status once it reaches ``until`` (or at the timeout), with ``seconds``: how
    long it was followed, and ``seen``: when each status was first seen."""
    started = time.monotonic()
    seen: dict[str, float] = {}
    while True:
        status = (await http.get(f"/api/mutations/{mutation_id}/status")).json()
        seen.setdefault(str(status.get("status")), round(time.monotonic() - started, 1))
        if status.get("status") in until or time.monotonic() - started > timeout_s:
            return {**status, "seconds": round(time.monotonic() - started, 1), "seen": seen}
        await asyncio.sleep(0.25)


async def withdraw(http: httpx.AsyncClient, mutation_ids: list[str]) -> None:
    """Roll back a round's kept traits: every round's traits are judged beside the same live set
    (a forager kept in one round would make the next round's forager redundant, not helpful)."""
    for mutation_id in mutation_ids:
        response = await http.post(f"/api/mutations/{mutation_id}/rollback", json={"reason": "bench.verdicts round"})
        if response.status_code not in (200, 202):
            raise SystemExit(f"bench.verdicts: rolling back {mutation_id} failed: {response.status_code}")
    for mutation_id in mutation_ids:
        end = await follow(http, mutation_id, ("rolled_back",), 120)
        if end.get("status") != "rolled_back":
            raise SystemExit(f"bench.verdicts: {mutation_id} was not rolled back within 120 s")


async def ticks_per_s(redis: aioredis.Redis, window_s: float, until: asyncio.Future) -> list[float]:
    """The live world's tick rate in each ``window_s`` window until ``until`` is done."""
    rates = []
    while not until.done():
        started, before = time.monotonic(), int((await engine_status(redis)).get("tick", 0))
        await asyncio.wait([until], timeout=window_s)
        elapsed = time.monotonic() - started
        if elapsed >= window_s / 2:  # a short last window says little
            rates.append((int((await engine_status(redis)).get("tick", 0)) - before) / elapsed)
    return rates


async def run_world(kind: str, args: argparse.Namespace, database_url: str, temporal: Any) -> dict[str, Any]:
    settings = bench_settings(
        temporal,
        database_url=database_url,
        redis_url=f"redis://127.0.0.1:6379/{args.redis_db}",
        task_queue=f"bench-verdicts-{kind}-{uuid.uuid4().hex[:6]}",
        mutations_dir=Path(tempfile.mkdtemp(prefix="bench-verdicts-")),
        engine_metrics_port=free_port(),
        worker_metrics_port=0,
        evolution_cycles_enabled=False,
        llm_provider="off",
    )
    settings = settings.override(journal_dir=settings.mutations_dir / "journal")
    redis = aioredis.from_url(settings.redis_url)
    await reset(database_url, redis, overrides=None)
    if kind == "busy":  # room for every busy trait and the planted ones: the world must hold them all
        async with get_engine(database_url).begin() as conn:
            room = args.busy_traits + 3 * args.each + 10
            await manifests.amend(conn, "bench.verdicts: a busy world", selection={"max_live_traits": room})
    worker, engine, api, filler_api = (
        worker_process(settings, "bench-verdicts-worker"),
        engine_process(settings, "bench-verdicts-engine"),
        api_process(settings, "bench-verdicts-api"),
        api_process(settings.override(verdict_mode="window", api_port=free_port()), "bench-verdicts-filler-api"),
    )
    processes = (worker, engine, api, filler_api)
    for process in processes:
        process.start()
    rounds: list[dict[str, Any]] = []
    rates: list[float] = []
    try:
        url = await asyncio.to_thread(wait_for_api, api, 60)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            for _ in range(600):  # the engine's first status: its world runs
                if (await engine_status(redis)).get("tick"):
                    break
                await asyncio.sleep(0.2)
            if kind == "busy":
                log(f"{kind}: proposing {args.busy_traits} benign traits")
                filler_url = await asyncio.to_thread(wait_for_api, filler_api, 60)
                filler = httpx.AsyncClient(base_url=filler_url, timeout=30)
                kinds = [WANDERER, STATEFUL]
                ids = [
                    await propose(
                        filler,
                        f"busy_{i:03d}",
                        kinds[i % len(kinds)].replace("{k}", str(i)),
                        f"busy-agent-{i % 20:02d}",
                    )
                    for i in range(args.busy_traits)
                ]
                for mutation_id in ids:
                    await follow(filler, mutation_id, ("activated", *TERMINAL), 600)
                await filler.aclose()
                live = len((await http.get("/api/traits")).json()["traits"])
                log(f"{kind}: {live} live traits")
                if live < args.busy_traits:
                    raise SystemExit(f"bench.verdicts: the busy world holds {live} live traits, not {args.busy_traits}")
            # The world is judged whole over the verdicts; trouble while the busy traits went live
            # (sixty loads in a few seconds) is reported beside them. Then the world runs alone
            # for a while: its own overruns, against which the verdicts' are compared.
            setup = await engine_counters(settings.engine.metrics_port)
            log(f"{kind}: {args.baseline_s:.0f} s of the live world alone")
            await asyncio.sleep(args.baseline_s)
            alone = await engine_counters(settings.engine.metrics_port)
            for round_number in range(args.each):
                names = {truth: f"{truth}_{round_number}_{uuid.uuid4().hex[:4]}" for truth in TRUTHS}
                ids = {
                    truth: await propose(
                        http, names[truth], PLANTED[truth].replace("{k}", str(round_number + 1)), f"planter-{truth}"
                    )
                    for truth in TRUTHS
                }
                verdicts = asyncio.gather(*(follow(http, ids[t], TERMINAL, args.timeout_s) for t in TRUTHS))
                rates.extend(await ticks_per_s(redis, 5.0, verdicts))
                ends = await verdicts
                for truth, end in zip(TRUTHS, ends):
                    report = end.get("verdict_report") or {}
                    rounds.append(
                        {
                            "truth": truth,
                            "mutation_id": ids[truth],
                            "status": end.get("status"),
                            "verdict": end.get("fitness_verdict"),
                            "reason": end.get("verdict_reason"),
                            "replicates": report.get("replicates"),
                            "fitness": (report.get("effects") or {}).get("fitness"),
                            "seconds": end["seconds"] if end.get("status") in TERMINAL else None,
                            "activated_after_s": end["seen"].get("activated"),
                        }
                    )
                log(
                    f"{kind}: round {round_number + 1}: "
                    + ", ".join(f"{r['truth']} {r['status']}/{r['verdict']}" for r in rounds[-3:])
                )
                await withdraw(http, [r["mutation_id"] for r in rounds[-3:] if r["status"] == "kept"])
            counters = await engine_counters(settings.engine.metrics_port)
    finally:
        for process in reversed(processes):
            process.stop()
        await redis.aclose()
    died = [p.name for p in processes if p.proc is not None and p.proc.returncode not in (0, -15, None)]
    return {
        "world": kind,
        "rounds": rounds,
        "ticks_per_s": rates,
        "counters": {key: value - setup.get(key, 0.0) for key, value in counters.items()},
        "alone": {key: value - setup.get(key, 0.0) for key, value in alone.items()},
        "during": {key: value - alone.get(key, 0.0) for key, value in counters.items()},
        "setup_health": {key: setup.get(key, 0.0) for key in HEALTH},
        "died": died,
    }


def matrix(rows: list[dict]) -> dict[str, dict[str, int]]:
    return {
        t: {str(v): sum(1 for r in rows if r["truth"] == t and r["verdict"] == v) for v in VERDICTS} for t in TRUTHS
    }


def overruns(counters: dict[str, float]) -> dict[str, float]:
    ticks, over = counters.get("genesis_engine_ticks", 0.0), counters.get("genesis_engine_tick_overruns", 0.0)
    return {"ticks": ticks, "overruns": over, "share": round(over / ticks, 4) if ticks else 0.0}


def overrun_comparison(world: dict[str, Any]) -> dict[str, Any]:
    """The live ticks that overran their period with the world alone (``--baseline-s`` before the
    first proposal) and while the planted traits were proposed, tested and judged (from the first
    round's proposals to the last verdict); the excess is the verdict work's doing."""
    alone, during = overruns(world["alone"]), overruns(world["during"])
    return {"alone": alone, "during_verdicts": during, "excess_share": round(during["share"] - alone["share"], 4)}


def summary(rows: list[dict], rates: list[float]) -> dict[str, Any]:
    times = [r["seconds"] for r in rows if r["seconds"] is not None]
    kinds = {t: [r for r in rows if r["truth"] == t] for t in TRUTHS}
    return {
        "confusion": matrix(rows),
        "rolled_back_share": {
            t: round(sum(r["status"] == "rolled_back" for r in rs) / len(rs), 2) if rs else None
            for t, rs in kinds.items()
        },
        "inconclusive_share": round(sum(r["verdict"] == "inconclusive" for r in rows) / len(rows), 2) if rows else None,
        "time_to_verdict_s": {"p50": percentile(times, 50), "p95": percentile(times, 95)},
        "time_to_activation_s_p50": percentile([r["activated_after_s"] for r in rows if r["activated_after_s"]], 50),
        "world_ticks_per_s_p50": round(statistics.median(rates), 1) if rates else None,
        "world_ticks_per_s_min": round(min(rates), 1) if rates else None,
        "reasons": dict(Counter(str(r["reason"])[:80] for r in rows).most_common(6)),
    }


def problems(world: dict[str, Any]) -> list[str]:
    found = []
    counters = world["counters"]
    for key in HEALTH:
        if counters.get(key):
            found.append(f"{world['world']}: {key} = {counters[key]}")
    if world["died"]:
        found.append(f"{world['world']}: processes died: {world['died']}")
    missing = [r["mutation_id"] for r in world["rounds"] if r["status"] not in TERMINAL]
    if missing:
        found.append(f"{world['world']}: no verdict within the timeout for {missing}")
    return found


async def main_async(args: argparse.Namespace) -> int:
    database_url = await prepare_database()
    env = await start_temporal()
    try:
        worlds = [await run_world(kind, args, database_url, env) for kind in args.worlds.split(",")]
    finally:
        await env.shutdown()
    every = [r for w in worlds for r in w["rounds"]]
    out = {
        "each": args.each,
        "busy_traits": args.busy_traits,
        "worlds": {
            w["world"]: {
                **summary(w["rounds"], w["ticks_per_s"]),
                "world_tick_overruns": overrun_comparison(w),
                "setup_health": w["setup_health"],
                "verdicts": w["rounds"],
            }
            for w in worlds
        },
        "all": summary(every, [x for w in worlds for x in w["ticks_per_s"]]),
    }
    print(json.dumps(out, indent=2))
    found = [p for w in worlds for p in problems(w)]
    for problem in found:
        print(f"bench.verdicts: not a valid run: {problem}", file=sys.stderr)
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--each", type=int, default=3, help="planted traits of each kind, per world")
    ap.add_argument("--busy-traits", type=int, default=60, help="live traits of the busy world")
    ap.add_argument("--worlds", default="fresh,busy")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="the longest a planted trait is followed")
    ap.add_argument(
        "--baseline-s", type=float, default=60.0, help="the live world alone before the first proposal (its overruns)"
    )
    ap.add_argument("--redis-db", type=int, default=13, help="Redis database owned by the bench (flushed)")
    return asyncio.run(main_async(ap.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
