"""Open Mutation API under load, measured by the load tools themselves (wrk, hey), in one run.

Starts its own Temporal dev server and one API process (one uvicorn worker, ``GENESIS_AUTH=open``,
rate limits raised for the run) against the running Postgres/Redis (`make services`), writes a
real WorldSnapshot (300 engine ticks in process) and one published task, then:

- context endpoints, each for ``--seconds`` with ``wrk -t2 -c32 --latency``: requests/s and
  latency percentiles as wrk reports them (target: >= 1,000 req/s each);
- propose at a fixed 100 req/s for ``--seconds`` with ``hey -c 10 -q 10`` (10 workers x 10 req/s):
  p50/p95/p99 as hey reports them (target: p99 <= 50 ms), after ``--warm-up-seconds`` of the same
  load that is not measured: the propose pool grows to the connections a burst of 10 needs, and
  the Temporal server's first starts are behind it (a server's steady state, not its first second).
  No worker polls the run's task queue, so this is the admission path alone — body checks,
  the rate-limit script, the Postgres insert, starting the workflow in Temporal — not sandbox
  tests competing for the same two cores; the throwaway dev server drops the workflows after.
- the start lag of those proposals: from the row's ``created_at`` (the 202) to the workflow's
  start time in Temporal (p50/p95/p99/max), and that every accepted proposal's workflow started.

    python -m bench.bench_api [--seconds 10] [--warm-up-seconds 3] [--propose-only]
                              [--database-url URL] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import redis.asyncio as aioredis
from sqlalchemy import delete, func, select

from bench.bench_pipeline import BENCH_DATABASE_URL, bench_settings, start_temporal
from cli.processes import api_process, wait_for_api
from genesis.config import Settings
from genesis.db.models import Mutation
from genesis.db.session import get_engine, get_sessionmaker
from genesis.ids import mutation_workflow_id

CONTEXT_PATHS = ["/api/agents/context/sandbox-api", "/api/agents/context/tasks", "/api/agents/context/metrics"]
TARGET_CONTEXT_RPS = 1000
TARGET_PROPOSE_P99_MS = 50
PROPOSE_RATE = 100  # requests per second: hey's -c workers x -q per-worker rate
HEY_WORKERS = 10
BENCH_AGENT = "bench-load"
START_WAIT_S = 120  # how long the accepted proposals' workflows may take to all start


def need_tools() -> None:
    missing = [tool for tool in ("wrk", "hey") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"missing load tools {missing}: apt-get install -y wrk hey (make bench does it)")


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def run_wrk(url: str, seconds: int) -> dict:
    out = subprocess.run(
        ["wrk", "-t2", "-c32", f"-d{seconds}s", "--latency", url], capture_output=True, text=True, check=True
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    latency = {
        f"p{p}_ms": round(_ms(v, u), 2)
        for p, v, u in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)
    }
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return {
        "requests_per_s": rps,
        **latency,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": errors.group(0) if errors else None,
        "target_requests_per_s": TARGET_CONTEXT_RPS,
    }


def trait_body(tag: str) -> str:
    code = (
        "class BaseTrait:\n    pass\n\nclass LoadTrait(BaseTrait):\n"
        "    async def execute(self, entity) -> None:\n"
        f"        if entity.state != '{tag}':\n            entity.direction = entity.direction + 0.01\n"
    )
    return json.dumps({"agent_id": BENCH_AGENT, "trait_name": "load_trait", "code": code})


def run_hey(url: str, seconds: int, workdir: Path) -> dict:
    """hey sends one body file for every request; that is fine here, since duplicate code is
    only detected later, in the workflow's validation, not at admission."""
    body = workdir / "propose.json"
    body.write_text(trait_body(f"load-{time.time_ns()}"))
    out = subprocess.run(
        [
            "hey",
            "-z",
            f"{seconds}s",
            "-c",
            str(HEY_WORKERS),
            "-q",
            str(PROPOSE_RATE // HEY_WORKERS),
            "-m",
            "POST",
            "-T",
            "application/json",
            "-D",
            str(body),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    percentiles = {
        f"p{p}_ms": round(float(v) * 1000, 2) for p, v in re.findall(r"^\s+(50|90|95|99)%+ in ([\d.]+) secs", out, re.M)
    }
    codes = {code: int(n) for code, n in re.findall(r"\[(\d{3})\]\s+(\d+) responses", out)}
    return {
        "requests_per_s": rps,
        **percentiles,
        "status_codes": codes,
        "target_rate_per_s": PROPOSE_RATE,
        "target_p99_ms": TARGET_PROPOSE_P99_MS,
    }


async def seed_context(settings: Settings) -> None:
    """A real WorldSnapshot (the engine's own telemetry) and one task, in the bench's Redis db."""
    from engine.process.loop import Engine

    redis = aioredis.from_url(settings.redis_url)
    await redis.flushdb()
    await redis.aclose()
    engine = Engine(settings)
    try:
        await engine.run_ticks(settings.engine.snapshot_interval)
        await engine.sink.flush()
    finally:
        await engine.close()


async def publish_task(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/api/agents/tasks",
        json={
            "task_id": f"bench-{time.time_ns()}",
            "severity": "high",
            "problem_type": "energy_crisis",
            "description": "Average energy is falling",
            "world_context": {"avg_energy": 31.5},
        },
    )
    if response.status_code not in (200, 201, 202):
        raise SystemExit(f"could not publish the bench task: {response.status_code} {response.text}")


def _percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))]


async def queued_backlog(settings: Settings) -> int:
    """Drop the rows an interrupted earlier run left; count the other queued rows (left alone: the
    run's sweeper only restarts rows a day old)."""
    sessions = get_sessionmaker(settings.database_url)
    async with sessions() as session:
        await session.execute(delete(Mutation).where(Mutation.agent_id == BENCH_AGENT))
        await session.commit()
        backlog = await session.scalar(select(func.count()).where(Mutation.status == "queued"))
    await get_engine(settings.database_url).dispose()
    return backlog


async def start_lags(env, settings: Settings, since: datetime) -> dict:
    """Seconds from each accepted row's ``created_at`` to its workflow's start in Temporal, once
    every accepted row's workflow has started (or ``START_WAIT_S`` passed: the rest are counted)."""
    sessions = get_sessionmaker(settings.database_url)
    async with sessions() as session:
        rows = (
            await session.execute(
                select(Mutation.workflow_id, Mutation.created_at).where(
                    Mutation.agent_id == BENCH_AGENT, Mutation.created_at >= since
                )
            )
        ).all()
    accepted = {workflow_id: created for workflow_id, created in rows}
    started: dict[str, datetime] = {}
    deadline = time.monotonic() + START_WAIT_S
    while not accepted.keys() <= started.keys() and time.monotonic() < deadline:
        async for wf in env.client.list_workflows(f"TaskQueue = '{settings.task_queue}'"):
            started[wf.id] = wf.start_time
        if not accepted.keys() <= started.keys():
            await asyncio.sleep(1)
    unknown = {w for w in started.keys() - accepted.keys() if w.startswith(mutation_workflow_id(""))}
    if unknown:
        print(f"{len(unknown)} workflows without an accepted row, e.g. {sorted(unknown)[:3]}", file=sys.stderr)
    async with sessions() as session:  # the rows die with the throwaway dev server: else a later
        # run's sweeper would start them again in its measurement (queued rows are its outbox)
        await session.execute(delete(Mutation).where(Mutation.agent_id == BENCH_AGENT))
        await session.commit()
    await get_engine(settings.database_url).dispose()
    lags = sorted((started[w] - created).total_seconds() for w, created in accepted.items() if w in started)
    figures = {f"p{int(q * 100)}_s": round(_percentile(lags, q), 3) for q in (0.5, 0.95, 0.99)} if lags else {}
    return {
        "accepted": len(accepted),
        "started": len(lags),
        "not_started": len(accepted) - len(lags),
        **figures,
        "max_s": round(lags[-1], 3) if lags else None,
    }


def _children() -> list[tuple[int, str, list[str]]]:
    """(pid, name, stat fields after the name) of this process' children: the API (python), the
    Temporal dev server, hey. Linux /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited meanwhile
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[1]) == os.getpid():
            found.append((int(stat.parent.name), text[text.index("(") + 1 : text.rindex(")")], fields))
    return found


def children_cpu_s() -> dict[str, float]:
    """CPU seconds (user + system) so far of the children by name (stat fields 14-15, in ticks)."""
    tick = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for _, name, fields in _children():
        used[name] = used.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return used


def machine_busy_s() -> float:
    """CPU seconds all processes of the machine have used so far (/proc/stat: user..steal)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    busy = sum(int(v) for v in fields[:8]) - int(fields[3]) - int(fields[4])  # minus idle, iowait
    return busy / os.sysconf("SC_CLK_TCK")


def gc_pauses(exposition: str) -> dict:
    """The API's garbage-collection pauses since it started (genesis/gc_tuning.py), per generation."""
    found: dict[str, dict] = {}
    for metric, generation, value in re.findall(
        r'^genesis_gc_pause_(seconds_count|seconds_sum|max_seconds)\{generation="(\d)"\} (\S+)$', exposition, re.M
    ):
        key = {"seconds_count": "count", "seconds_sum": "total_ms", "max_seconds": "max_ms"}[metric]
        number = float(value)
        found.setdefault(generation, {})[key] = int(number) if key == "count" else round(number * 1000, 1)
    return found


def renice_temporal(niceness: int) -> None:
    """Run the dev server at a lower CPU priority than the API (all its threads: Go runs several)."""
    for pid, name, _ in _children():
        if name == "temporal":
            for thread in Path(f"/proc/{pid}/task").iterdir():
                os.setpriority(os.PRIO_PROCESS, int(thread.name), niceness)


def profile_api(pid: int, seconds: int, out: str) -> subprocess.Popen:
    """Sample the API process with py-spy (the `bench` extra) while hey runs, without pausing it; the
    output is py-spy's collapsed stacks ("raw"), one ``frame;frame;... count`` line per stack."""
    return subprocess.Popen(
        [
            str(Path(sys.executable).with_name("py-spy")),
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(seconds),
            "--rate",
            "250",
            "--format",
            "raw",
            "--output",
            out,
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def main(
    seconds: int,
    database_url: str,
    redis_url: str,
    propose_only: bool,
    py_spy_out: str | None = None,
    temporal_nice: int = 0,
    warm_up_s: int = 0,
) -> dict:
    need_tools()
    env = await start_temporal()
    if temporal_nice:
        renice_temporal(temporal_nice)
    settings = bench_settings(
        env, database_url=database_url, redis_url=redis_url, task_queue=f"genesis-bench-api-{time.time_ns()}"
    )  # nobody polls it: admission only
    await seed_context(settings)
    backlog = await queued_backlog(settings)
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
        context = (
            {}
            if propose_only
            else {path: await asyncio.to_thread(run_wrk, url + path, seconds) for path in CONTEXT_PATHS}
        )
        propose_url = url + "/api/mutations/propose"
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            if warm_up_s:
                await asyncio.to_thread(run_hey, propose_url, warm_up_s, workdir)
            since = datetime.now(UTC)
            cpu_before, machine_before, wall_before = children_cpu_s(), machine_busy_s(), time.monotonic()
            profiler = profile_api(api.proc.pid, seconds, py_spy_out) if py_spy_out else None
            propose = await asyncio.to_thread(run_hey, propose_url, seconds, workdir)
        machine_after, wall_after = machine_busy_s(), time.monotonic()
        # Everything on the machine, the run's own processes included (the machine may be shared).
        propose["machine_cores_busy"] = round((machine_after - machine_before) / (wall_after - wall_before), 2)
        if profiler is not None:
            await asyncio.to_thread(profiler.wait, 30)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            propose["api_gc_pauses"] = gc_pauses((await http.get("/metrics")).text)
        lags = await start_lags(env, settings, since)
        cpu_after = children_cpu_s()  # once every workflow has started: the starts' cost is in
        answered = sum(propose["status_codes"].values()) or 1
        propose["cpu_ms_per_request"] = {  # API ("python") and Temporal; hey has exited by now
            name: round(1000 * (cpu_after[name] - cpu_before.get(name, 0.0)) / answered, 2)
            for name in cpu_after
            if name in ("python", "temporal")
        }
    finally:
        api.stop()
        await env.shutdown()
    return {
        "benchmark": "open_mutation_api",
        "api_workers": 1,
        "temporal_nice": temporal_nice,
        "propose_warm_up_s": warm_up_s,
        **(
            {
                "context_endpoints_wrk": context,
                "context_min_requests_per_s": min(c["requests_per_s"] for c in context.values()),
            }
            if context
            else {}
        ),
        "propose_fixed_rate_hey": propose,
        "propose_workflow_start_lag": lags,
        "other_queued_rows_left_alone": backlog,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument(
        "--warm-up-seconds",
        type=int,
        default=3,
        metavar="S",
        help="propose load before the measured run, not measured (default 3; 0: none)",
    )
    parser.add_argument("--propose-only", action="store_true", help="skip the context endpoints (wrk)")
    parser.add_argument("--database-url", default=BENCH_DATABASE_URL, help="a migrated database of your own")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14", help="flushed by the run")
    parser.add_argument("--py-spy", metavar="OUT", help="profile the API during the propose run (collapsed stacks)")
    parser.add_argument(
        "--temporal-nice",
        type=int,
        default=int(os.environ.get("GENESIS_TEMPORAL_NICE", "10")),
        metavar="N",
        help="run the Temporal dev server at niceness N, as `make run` does "
        "(GENESIS_TEMPORAL_NICE, default 10): the API first, the workflow starts after",
    )
    args = parser.parse_args()
    print(
        json.dumps(
            asyncio.run(
                main(
                    args.seconds,
                    args.database_url,
                    args.redis_url,
                    args.propose_only,
                    args.py_spy,
                    args.temporal_nice,
                    args.warm_up_seconds,
                )
            ),
            indent=2,
        )
    )
