"""Open Mutation API under load, measured by the load tools themselves (wrk, hey), in one run.

Starts its own Temporal dev server and one API process (one uvicorn worker, ``GENESIS_AUTH=open``,
rate limits raised for the run) against the running Postgres/Redis (`make services`), writes a
real WorldSnapshot (300 engine ticks in process) and one published task, then:

- context endpoints, each for ``--seconds`` with ``wrk -t2 -c32 --latency``: requests/s and
  latency percentiles as wrk reports them (target: >= 1,000 req/s each);
- propose at a fixed 100 req/s for ``--seconds`` with ``hey -c 10 -q 10`` (10 workers x 10 req/s):
  p50/p95/p99 as hey reports them (target: p99 <= 50 ms).
  No worker polls the run's task queue, so this is the admission path alone — body checks,
  the rate-limit script, the Postgres insert, starting the workflow in Temporal — not sandbox
  tests competing for the same two cores; the throwaway dev server drops the workflows after.

    python -m bench.bench_api [--seconds 10]     # prints one JSON object
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import redis.asyncio as aioredis

from bench.bench_pipeline import BENCH_DATABASE_URL, start_temporal
from genesis.config import Settings
from genesis.harness import api_process, free_port, wait_for_api

CONTEXT_PATHS = ["/api/agents/context/sandbox-api", "/api/agents/context/tasks", "/api/agents/context/metrics"]
TARGET_CONTEXT_RPS = 1000
TARGET_PROPOSE_P99_MS = 50
PROPOSE_RATE = 100  # requests per second: hey's -c workers x -q per-worker rate
HEY_WORKERS = 10



def need_tools() -> None:
    missing = [tool for tool in ("wrk", "hey") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"missing load tools {missing}: apt-get install -y wrk hey (make bench does it)")


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def run_wrk(url: str, seconds: int) -> dict:
    out = subprocess.run(["wrk", "-t2", "-c32", f"-d{seconds}s", "--latency", url],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    latency = {f"p{p}_ms": round(_ms(v, u), 2)
               for p, v, u in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)}
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return {"requests_per_s": rps, **latency, "non_2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": errors.group(0) if errors else None, "target_requests_per_s": TARGET_CONTEXT_RPS}


def trait_body(tag: str) -> str:
    code = ("class BaseTrait:\n    pass\n\nclass LoadTrait(BaseTrait):\n"
            "    async def execute(self, entity) -> None:\n"
            f"        if entity.state != '{tag}':\n            entity.direction = entity.direction + 0.01\n")
    return json.dumps({"agent_id": "bench-load", "trait_name": "load_trait", "code": code})


def run_hey(url: str, seconds: int, workdir: Path) -> dict:
    """hey sends one body file for every request; that is fine here, since duplicate code is
    only detected later, in the workflow's validation, not at admission."""
    body = workdir / "propose.json"
    body.write_text(trait_body(f"load-{time.time_ns()}"))
    out = subprocess.run(
        ["hey", "-z", f"{seconds}s", "-c", str(HEY_WORKERS), "-q", str(PROPOSE_RATE // HEY_WORKERS),
         "-m", "POST", "-T", "application/json", "-D", str(body), url],
        capture_output=True, text=True, check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    percentiles = {f"p{p}_ms": round(float(v) * 1000, 2)
                   for p, v in re.findall(r"^\s+(50|90|95|99)%+ in ([\d.]+) secs", out, re.M)}
    codes = {code: int(n) for code, n in re.findall(r"\[(\d{3})\]\s+(\d+) responses", out)}
    return {"requests_per_s": rps, **percentiles, "status_codes": codes, "target_rate_per_s": PROPOSE_RATE,
            "target_p99_ms": TARGET_PROPOSE_P99_MS}


async def seed_context(settings: Settings) -> None:
    """A real WorldSnapshot (the engine's own telemetry) and one task, in the bench's Redis db."""
    from engine.loop import Engine

    redis = aioredis.from_url(settings.redis_url)
    await redis.flushdb()
    await redis.aclose()
    engine = Engine(settings)
    try:
        await engine.run_ticks(settings.engine_snapshot_interval)
        await engine.sink.flush()
    finally:
        await engine.close()


async def publish_task(http: httpx.AsyncClient) -> None:
    response = await http.post("/api/agents/tasks", json={
        "task_id": f"bench-{time.time_ns()}", "severity": "high", "problem_type": "energy_crisis",
        "description": "Average energy is falling", "world_context": {"avg_energy": 31.5},
    })
    if response.status_code not in (200, 201, 202):
        raise SystemExit(f"could not publish the bench task: {response.status_code} {response.text}")


async def main(seconds: int) -> dict:
    need_tools()
    env = await start_temporal()
    settings = Settings(
        database_url=BENCH_DATABASE_URL,
        redis_url="redis://127.0.0.1:6379/14",
        temporal_address=env.client.service_client.config.target_host,
        task_queue=f"genesis-bench-api-{time.time_ns()}",  # nobody polls it: admission only
        api_port=free_port(),
        auth="open",
        ratelimit_active_per_agent=10**9,
        ratelimit_proposals_per_ip_minute=10**9,
        ratelimit_proposals_per_agent_hour=10**9,
    )
    await seed_context(settings)
    api = api_process(settings, "bench-api")
    api.start()
    try:
        url = await asyncio.to_thread(wait_for_api, api)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            await publish_task(http)
            for path in CONTEXT_PATHS:
                response = await http.get(path)
                if response.status_code != 200:
                    raise SystemExit(f"{path} answered {response.status_code}: {response.text[:300]}")
        context = {path: await asyncio.to_thread(run_wrk, url + path, seconds) for path in CONTEXT_PATHS}
        with tempfile.TemporaryDirectory() as workdir:
            propose = await asyncio.to_thread(run_hey, url + "/api/mutations/propose", seconds, Path(workdir))
    finally:
        api.stop()
        await env.shutdown()
    return {
        "benchmark": "open_mutation_api",
        "api_workers": 1,
        "context_endpoints_wrk": context,
        "context_min_requests_per_s": min(c["requests_per_s"] for c in context.values()),
        "propose_fixed_rate_hey": propose,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.seconds)), indent=2))
