"""Agents' rounds under load, in one run, against a real engine, API, Postgres and action host.

Starts its own Temporal dev server, one API process and one engine (rounds on, a journal of its
own, paced at 60 ticks/s) on the running Postgres/Redis (`make services`), registers
``--agents`` agents, then:

- **submission latency** at a fixed ``--rate`` (50 req/s) for ``--seconds``: each request a new
  submission (its own idempotency key), agents in turn, open loop (a request is sent on schedule
  whether or not the earlier ones were answered): p50/p95/p99/max as the client measured them,
  against the target p99 <= 50 ms;
- **a full round**: every agent submits one action to the same round; from the round's closing to
  its settling (Postgres' own times), against the round's window (the manifest's ``rounds.ticks``
  at the tick rate): the target is settling within the window.

The run fails loudly when the system was not whole: an engine that died, a round that did not
settle, a submission rejected for anything but its own code (``killed``, ``deadline``,
``no_body``), or fewer submissions in the round's receipt than were accepted.

    python -m bench.rounds [--agents 100] [--rate 50] [--seconds 20]
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
from pathlib import Path

import httpx
from sqlalchemy import select

from bench.bench_pipeline import BENCH_DATABASE_URL, bench_settings, start_temporal
from cli.processes import api_process, engine_process, wait_for_api
from genesis.db.migrate import upgrade_to_head
from genesis.db.models import WorldRound
from genesis.db.session import get_engine
from governance.records import manifests

TARGET_P99_MS = 50.0
ROUND_TICKS = 300
ACTION = """
def agent_action(engine, member_id):
    me = engine.member
    if engine.resources:
        food = engine.resources[0]
        engine.move_towards(member_id, food.x, food.y)
        engine.eat(member_id)
    for other in engine.neighbours[:2]:
        if other.energy < me.energy / 2:
            engine.share(member_id, other.id, 1.0)
"""
NOT_ITS_FAULT = {"killed", "deadline", "no_body", "not_settled"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def wait_for_accepting(http: httpx.AsyncClient, after: int = 0, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = await http.get("/v1/world/rounds/current/deadline")
        if answer.status_code == 200:
            body = answer.json()
            if body["state"] == "accepting" and body["round_id"] > after and body["seconds_remaining"] > 2:
                return body
        await asyncio.sleep(0.1)
    raise SystemExit("no round opened: the engine is not running rounds (see its log)")


async def latency(http: httpx.AsyncClient, keys: list[str], rate: float, seconds: float) -> dict:
    """Open-loop submissions at ``rate`` per second."""
    run = uuid.uuid4().hex[:6]
    times: list[float] = []
    statuses: dict[int, int] = {}
    rounds_seen: set[int] = set()

    async def one(i: int) -> None:
        key = keys[i % len(keys)]
        started = time.perf_counter()
        try:
            body = {"code": ACTION, "idempotency_key": f"lat-{run}-{i}"}
            answer = await http.post("/v1/world/actions", json=body, headers={"X-API-Key": key})
        except httpx.TransportError:  # counted (status 0): the run fails when more than a few are lost
            statuses[0] = statuses.get(0, 0) + 1
            return
        times.append((time.perf_counter() - started) * 1000)
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
        if answer.status_code == 202:
            rounds_seen.add(answer.json()["round_id"])

    total = int(rate * seconds)
    begin = time.perf_counter()
    tasks = []
    for i in range(total):
        delay = begin + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    accepted = statuses.get(202, 0)
    if accepted < total * 0.95:  # a few may meet the instant between two rounds
        raise SystemExit(f"submissions were refused: {statuses}")
    return {
        "requests": total,
        "rate_per_second": rate,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(percentile(times, 0.95), 2),
        "p99_ms": round(percentile(times, 0.99), 2),
        "max_ms": round(max(times), 2),
        "target_p99_ms": TARGET_P99_MS,
        "p99_vs_target": round(percentile(times, 0.99) / TARGET_P99_MS, 3),
        "rounds": sorted(rounds_seen),
    }


async def full_round(http: httpx.AsyncClient, keys: list[str], database, tick_rate: float, after: int) -> dict:
    """Every agent submits to one round (a fresh one, after round ``after``); how long it takes to
    settle after it closes."""
    current = await wait_for_accepting(http, after=after)
    run = uuid.uuid4().hex[:6]
    answers = await asyncio.gather(
        *(
            http.post(
                "/v1/world/actions",
                json={"code": ACTION, "idempotency_key": f"round-{run}-{i}"},
                headers={"X-API-Key": key},
            )
            for i, key in enumerate(keys)
        )
    )
    ids = {a.json()["round_id"] for a in answers if a.status_code == 202}
    if len(ids) != 1 or sum(a.status_code == 202 for a in answers) != len(keys):
        raise SystemExit(f"the agents' submissions did not all land in one round: {[a.text for a in answers][:3]}")
    (round_id,) = ids
    deadline = time.monotonic() + 120
    while True:
        done = (await http.get(f"/v1/world/rounds/{round_id}")).json()
        if done["state"] == "settled":
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"round {round_id} did not settle")
        await asyncio.sleep(0.1)
    async with database.connect() as conn:
        row = (await conn.execute(select(WorldRound).where(WorldRound.round_id == round_id))).one()
    subs = done["submissions"]
    bad = [s for s in subs if s["status"] == "rejected" and s["error"] in NOT_ITS_FAULT]
    if bad or len(subs) != len(keys):
        raise SystemExit(f"round {round_id} was not whole: {len(subs)} submissions, {bad[:3]}")
    receipt = (await http.get(f"/v1/receipts/{done['receipt_id']}")).json()
    if len(receipt["body"]["submissions"]) != len(keys):
        raise SystemExit("the round's receipt does not list every submission")
    settle_s = (row.settled_at - row.closed_at).total_seconds()
    window_s = (row.closes_tick - row.opens_tick) / tick_rate
    return {
        "round_id": round_id,
        "agents": len(keys),
        "applied": sum(s["status"] == "applied" for s in subs),
        "window_s": round(window_s, 3),
        "settle_s": round(settle_s, 3),
        "settle_vs_window": round(settle_s / window_s, 3),
        "within_window": settle_s <= window_s,
        "first_round_seen": current["round_id"],
    }


async def main(agents: int, rate: float, seconds: float) -> dict:
    await asyncio.to_thread(upgrade_to_head, BENCH_DATABASE_URL)
    env = await start_temporal()
    database = get_engine(BENCH_DATABASE_URL)
    settings = bench_settings(
        env,
        database_url=BENCH_DATABASE_URL,
        redis_url="redis://127.0.0.1:6379/14",
        task_queue="genesis-bench-rounds",
        rounds_enabled=True,
        rounds_max_members=10_000,  # the bench database keeps the agents of earlier runs
        journal_dir=Path(tempfile.mkdtemp(prefix="bench-rounds-journal-")),
        engine_metrics_port=0,
    ).override(auth="required")  # agents act with their keys, as in production
    async with database.begin() as conn:
        before = await manifests.current(conn, settings)
        if before.document["rounds"]["ticks"] != ROUND_TICKS:
            await manifests.record(conn, {**before.document, "rounds": {"ticks": ROUND_TICKS}}, "bench", before.hash)
    api = api_process(settings, "api-bench-rounds")
    engine = engine_process(settings, "engine-bench-rounds", fast_forward=False)
    api.start()
    engine.start()
    try:
        url = await asyncio.to_thread(wait_for_api, api)
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
            keys = []
            for i in range(agents):
                answer = await http.post("/v1/agents/register", json={"name": f"bench-round-{i}"})
                if answer.status_code != 201:
                    raise SystemExit(f"registration failed: {answer.text}")
                keys.append(answer.json()["api_key"])
            await wait_for_accepting(http)
            measured = await latency(http, keys, rate, seconds)
            settled = await full_round(http, keys, database, settings.engine.tick_rate, max(measured["rounds"]))
            if engine.proc is None or engine.proc.poll() is not None:
                raise SystemExit(f"the engine died during the run; see {engine.log_path}")
        return {"submission_latency": measured, "full_round": settled}
    finally:
        engine.stop()
        api.stop()
        await database.dispose()
        await env.shutdown()


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    out = asyncio.run(main(args.agents, args.rate, args.seconds))
    print(json.dumps(out, indent=2))
    sys.stdout.flush()


if __name__ == "__main__":
    cli()
