"""Cheap abuse against a live stack, side by side with no abuse: an honest client's latency while
one client floods.

Starts its own Temporal dev server, worker and API (``GENESIS_AUTH=required``, the default
socket, patch, registration and rule-proposal limits; the honest agent's own check and proposal
limits raised, since honest and flooding clients share this machine's one address) on a fresh
database and Redis db, and runs each scenario for ``--seconds``:

- ``idle``: nothing but the honest client;
- ``sockets``: 500 WebSockets opened from one address to ``/ws/world``, ``/ws/feed`` and the
  telemetry stream (50 at a time), those admitted held open;
- ``handshakes``: the same, then opened again as fast as they are refused, 50 at a time: a
  connection-rate flood, which costs the API a handshake each however cheaply it refuses;
- ``patch``: an agent proposing 200-op manifest patches whose ``copy`` ops double the document;
- ``registration``: registrations from one address, as fast as they are answered;
- ``rules``: an agent proposing rule changes as fast as they are answered.

The honest client meanwhile checks a trait (``POST /api/mutations/check``, refused by the
gatekeeper: the rate-limit script, the gatekeeper, the check's record), proposes one
(``POST /api/mutations/propose``: the admission path to the workflow's start) and reads
(``GET /api/traits`` and ``GET /api/feed``), one after the other. Printed as JSON: per scenario,
per request kind, p50/p95 and the ratio to idle, the flood's outcomes, and a health check — the
run fails loudly when an honest request answered 5xx or a process died.

    python -m bench.abuse [--seconds 10] [--scenarios idle,sockets,handshakes,patch,registration,rules]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import redis.asyncio as aioredis
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus, WebSocketException

from bench.bench_pipeline import bench_settings, forbidden_trait, percentiles, start_temporal
from cli.processes import worker_and_api
from genesis.db.migrate import fresh_database

DATABASE_URL = "postgresql+asyncpg://genesis:genesis@127.0.0.1:5432/genesis_bench_abuse"
REDIS_URL = "redis://127.0.0.1:6379/12"
SCENARIOS = ("idle", "sockets", "handshakes", "patch", "registration", "rules")
SOCKET_ROUTES = ("/ws/world", "/ws/feed", "/api/agents/telemetry")
HONEST_KINDS = ("check", "propose", "read")


async def register(http: httpx.AsyncClient, name: str) -> dict[str, str]:
    answer = await http.post("/v1/agents/register", json={"name": name})
    if answer.status_code != 201:
        raise SystemExit(f"registration of {name} failed: {answer.status_code} {answer.text}")
    return {"X-API-Key": answer.json()["api_key"]}


class Honest:
    """The honest client: its latencies per kind, and any answer that says the server failed."""

    def __init__(self, http: httpx.AsyncClient, headers: dict[str, str]) -> None:
        self.http, self.headers = http, headers
        self.samples: dict[str, list[float]] = {kind: [] for kind in HONEST_KINDS}
        self.failures: list[str] = []
        self.n = 0

    async def _timed(self, kind: str, request: Awaitable[httpx.Response]) -> None:
        started = time.perf_counter()
        answer = await request
        self.samples[kind].append((time.perf_counter() - started) * 1000)
        if answer.status_code >= 500 or answer.status_code == 429:
            self.failures.append(f"{kind}: {answer.status_code} {answer.text[:200]}")

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.n += 1
            body = {"trait_name": f"honest_{self.n}", "code": forbidden_trait(f"honest {time.time_ns()}")}
            await self._timed("check", self.http.post("/api/mutations/check", json=body, headers=self.headers))
            await self._timed("propose", self.http.post("/api/mutations/propose", json=body, headers=self.headers))
            await self._timed("read", self.http.get("/api/traits"))
            await self._timed("read", self.http.get("/api/feed", params={"limit": 20}))
            await asyncio.sleep(0.05)


async def flood_sockets(url: str, stop: asyncio.Event, outcomes: Counter, again: bool = False) -> None:
    base = url.replace("http://", "ws://")
    held: list[Any] = []

    async def one(i: int) -> None:
        try:
            socket = await connect(base + SOCKET_ROUTES[i % len(SOCKET_ROUTES)], open_timeout=10)
        except InvalidStatus as exc:
            outcomes[f"refused {exc.response.status_code}"] += 1
            return
        except (OSError, WebSocketException, TimeoutError):
            outcomes["not_opened"] += 1
            return
        try:
            first = await asyncio.wait_for(socket.recv(), 0.5)
            if "TOO_MANY_SOCKETS" in str(first):
                outcomes["refused 1013"] += 1
                await socket.close()
                return
        except TimeoutError:
            pass  # an idle stream: admitted
        except WebSocketException:
            outcomes["closed"] += 1
            return
        outcomes["held"] += 1
        held.append(socket)

    try:
        for start in range(0, 500, 50):
            await asyncio.gather(*(one(i) for i in range(start, start + 50)))
        while again and not stop.is_set():  # handshakes: again as fast as they are refused
            await asyncio.gather(*(one(i) for i in range(50)))
        await stop.wait()
    finally:
        for socket in held:
            with contextlib.suppress(Exception):
                await socket.close()


async def flood_patches(http: httpx.AsyncClient, stop: asyncio.Event, outcomes: Counter, headers: dict) -> None:
    doubling = [{"op": "add", "path": "/policy/x", "value": {}}]
    doubling += [{"op": "copy", "from": "/policy", "path": f"/policy/x/c{i}"} for i in range(199)]
    refused_ms: list[float] = []
    while not stop.is_set():
        base = (await http.get("/v1/manifest")).json()["hash"]
        started = time.perf_counter()
        answer = await http.post(
            "/v1/governance/proposals", json={"base_hash": base, "ops": doubling, "reason": "x"}, headers=headers
        )
        refused_ms.append((time.perf_counter() - started) * 1000)
        outcomes[f"{answer.status_code} {answer.json().get('error')}"] += 1
    outcomes["answer_p95_ms"] = int(percentiles(refused_ms)["p95_ms"]) if refused_ms else 0


async def flood_registrations(http: httpx.AsyncClient, stop: asyncio.Event, outcomes: Counter) -> None:
    while not stop.is_set():
        answer = await http.post("/v1/agents/register", json={"name": "sybil"})
        outcomes[str(answer.status_code)] += 1


async def flood_rules(http: httpx.AsyncClient, stop: asyncio.Event, outcomes: Counter, headers: dict) -> None:
    ticks = 600
    while not stop.is_set():
        ticks += 1
        base = (await http.get("/v1/manifest")).json()["hash"]
        ops = [{"op": "replace", "path": "/governance/shadow_ticks", "value": ticks}]
        answer = await http.post(
            "/v1/governance/proposals", json={"base_hash": base, "ops": ops, "reason": "flood"}, headers=headers
        )
        outcomes[f"{answer.status_code} {answer.json().get('error', 'accepted')}"] += 1


async def scenario(
    name: str, url: str, http: httpx.AsyncClient, honest_headers: dict, flooder: dict, seconds: float
) -> dict[str, Any]:
    floods: dict[str, Callable[[asyncio.Event, Counter], Awaitable[None]]] = {
        "sockets": lambda stop, out: flood_sockets(url, stop, out),
        "handshakes": lambda stop, out: flood_sockets(url, stop, out, again=True),
        "patch": lambda stop, out: flood_patches(http, stop, out, flooder),
        "registration": lambda stop, out: flood_registrations(http, stop, out),
        "rules": lambda stop, out: flood_rules(http, stop, out, flooder),
    }
    honest = Honest(http, honest_headers)
    outcomes: Counter = Counter()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(honest.run(stop))]
    if name in floods:
        tasks.append(asyncio.create_task(floods[name](stop, outcomes)))
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    return {
        "honest": {kind: percentiles(values) for kind, values in honest.samples.items() if values},
        "honest_failures": honest.failures[:5],
        "flood": dict(outcomes),
    }


async def main(seconds: float, names: list[str]) -> dict[str, Any]:
    await fresh_database(DATABASE_URL)
    env = await start_temporal()
    settings = bench_settings(
        env, database_url=DATABASE_URL, redis_url=REDIS_URL, task_queue="genesis-bench-abuse"
    ).override(
        auth="required",
        # honest and flooding clients share this machine's address: the per-IP proposal and
        # check limits, and the honest agent's, are not what is measured
        ratelimit_checks_per_agent_minute=10**6,
        ratelimit_checks_per_ip_minute=10**6,
        ratelimit_registrations_per_ip_hour=20,
    )
    redis = aioredis.from_url(REDIS_URL)
    await redis.flushdb()
    await redis.aclose()
    try:
        async with (
            worker_and_api(settings, "bench-abuse") as url,
            httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=64)) as http,
        ):
            honest_headers = await register(http, "honest")
            # registered before the registration flood uses up the address's hour
            flooders = {name: await register(http, f"flooder-{name}") for name in ("patch", "rules")}
            results: dict[str, Any] = {}
            for name in ["idle", *[n for n in names if n != "idle"]]:
                print(f"scenario {name} ...", file=sys.stderr)
                results[name] = await scenario(name, url, http, honest_headers, flooders.get(name, {}), seconds)
                await asyncio.sleep(2)  # sockets closed, queues drained
            alive = (await http.get("/api/health")).status_code == 200
    finally:
        await env.shutdown()
    idle = results["idle"]["honest"]
    for result in results.values():
        result["p95_vs_idle"] = {
            kind: round(stats["p95_ms"] / max(idle[kind]["p95_ms"], 0.1), 2)
            for kind, stats in result["honest"].items()
            if kind in idle
        }
    failures = {name: r["honest_failures"] for name, r in results.items() if r["honest_failures"]}
    report = {
        "seconds": seconds,
        "scenarios": results,
        "health": {"api_alive_at_end": alive, "honest_failures": failures},
        "within_2x_idle": {
            name: all(ratio <= 2.0 for ratio in r["p95_vs_idle"].values()) for name, r in results.items()
        },
    }
    if failures or not alive:
        print(json.dumps(report, indent=2))
        raise SystemExit("the honest client was failed by the server during a flood (see health)")
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    chosen = [s for s in args.scenarios.split(",") if s]
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}: choose from {', '.join(SCENARIOS)}")
    print(json.dumps(asyncio.run(main(args.seconds, chosen)), indent=2))
