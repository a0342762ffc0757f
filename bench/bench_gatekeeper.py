"""Gatekeeper throughput vs plain ``ast.parse`` of the same ~2 KB trait, in one run.

Usage: cd /work/main && .venv/bin/python bench/bench_gatekeeper.py [N] [--processes P]

Prints one JSON object. ``ratio_to_ast_parse`` is validations/s divided by ast.parse/s of the
same source (1.0 would mean validation costs no more than parsing), so it is comparable across
machines where absolute numbers are not.

Measured in interleaved rounds (every configuration sees the same machine load; medians):
- single process: ``genesis.gatekeeper.validate`` (the compiled build when it is built; its
  ``implementation``) and ``ast.parse`` in this process, and the pure-Python module beside them;
- the process pool the worker validates with (genesis/gatekeeper_pool.py, P helpers, default
  GENESIS_GATEKEEPER_PROCESSES or 2): validations/s with ``pool_in_flight`` requests outstanding,
  and ast.parse/s through the same pool and pipes, for ``pool_ratio_to_ast_parse``.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from genesis import gatekeeper, gatekeeper_core  # noqa: E402
from genesis.config import get_settings  # noqa: E402
from genesis.gatekeeper_pool import GatekeeperPool  # noqa: E402

validate = gatekeeper.validate

TARGET_VALIDATIONS_PER_SEC = 2000
ROUNDS = 7

TRAIT = '''\
from __future__ import annotations

import math
import random
from typing import Optional

SEEK_RADIUS = 40.0
EAT_RADIUS = 1.5
HEADINGS = (0.0, 1.571, 3.142, -1.571)


class BaseTrait:
    pass


class ForagerTrait(BaseTrait):
    def __init__(self, threshold=25.0, jitter=0.3, patience=8) -> None:
        self.threshold = threshold
        self.jitter = jitter
        self.patience = patience
        self.ticks_without_food = 0

    def wander_step(self, heading: float) -> tuple[float, float]:
        angle = heading + (random.random() - 0.5) * self.jitter
        return math.cos(angle), math.sin(angle)

    def best_heading(self, entity) -> Optional[tuple[float, float]]:
        best = None
        for index in range(len(HEADINGS)):
            dx, dy = self.wander_step(entity.direction + HEADINGS[index])
            score = math.hypot(dx, dy) * random.random()
            if best is None or score > best[0]:
                best = (score, dx, dy)
        return None if best is None else (best[1], best[2])

    async def execute(self, entity) -> None:
        target = entity.nearest_resource()
        hungry = entity.energy < self.threshold
        if target is None:
            self.ticks_without_food += 1
            step = self.best_heading(entity)
            if step is not None:
                entity.move(step[0], step[1])
            entity.state = "wandering"
            return
        dx, dy, distance = target
        if distance < EAT_RADIUS:
            entity.eat()
            self.ticks_without_food = 0
            entity.state = "eating"
        elif hungry or distance < SEEK_RADIUS:
            entity.speed = min(4.0, entity.speed + 0.5)
            entity.move_towards(entity.x + dx, entity.y + dy)
            entity.state = "seeking"
        else:
            entity.move(dx, dy)
        try:
            fullness = entity.energy / entity.max_energy
        except ZeroDivisionError:
            fullness = 0.0
        if fullness > 0.8 and self.ticks_without_food < self.patience:
            entity.energy_consumption_rate = max(0.5, entity.energy_consumption_rate * 0.95)
'''


POOL_IN_FLIGHT = 16
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def per_call_seconds(function: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def machine_busy_seconds() -> float:
    """CPU time every process on the machine used so far (all cores, not idle or iowait)."""
    values = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / CLOCK_TICKS


async def pool_call_seconds(pool: GatekeeperPool, request: Callable[[], object], calls: int) -> tuple[float, float]:
    """(wall time, CPU time of this process and the helpers) per call, with POOL_IN_FLIGHT callers
    each awaiting its calls one after another."""

    async def caller(count: int) -> None:
        for _ in range(count):
            await request()

    share, extra = divmod(calls, POOL_IN_FLIGHT)
    pids = pool.pids
    cpu = time.process_time() + sum(map(process_cpu_seconds, pids))
    start = time.perf_counter()
    await asyncio.gather(*(caller(share + (index < extra)) for index in range(POOL_IN_FLIGHT)))
    wall = time.perf_counter() - start
    cpu = time.process_time() + sum(map(process_cpu_seconds, pids)) - cpu
    return wall / calls, cpu / calls


async def measure(calls: int, processes: int) -> dict[str, list[float]]:
    def parse() -> object:
        return ast.parse(TRAIT)

    def check() -> object:
        return validate("forager", TRAIT)

    def check_pure() -> object:
        return gatekeeper_core.validate("forager", TRAIT)

    pool = GatekeeperPool(processes) if processes else None
    try:
        if pool is not None:
            pooled = await pool.validate("forager", TRAIT)
            if pooled != validate("forager", TRAIT):
                raise SystemExit(f"the pool's verdict differs: {pooled}")
        singles = {"parse": parse, "validate": check, "pure": check_pure}
        pooled_requests = {
            "pool_validate": lambda: pool.validate("forager", TRAIT), "pool_parse": lambda: pool.parse(TRAIT),
        } if pool is not None else {}
        for function in singles.values():  # warm caches and the allocator
            per_call_seconds(function, max(calls // 10, 10))
        for request in pooled_requests.values():
            await pool_call_seconds(pool, request, max(calls // 10, 10))
        # Interleaved rounds so all see the same machine load; the median resists noise.
        times: dict[str, list[float]] = {
            name: [] for name in (*singles, *pooled_requests, *(f"{name}_cpu" for name in pooled_requests))
        }
        for _ in range(ROUNDS):
            for name, function in singles.items():
                times[name].append(per_call_seconds(function, calls))
            for name, request in pooled_requests.items():
                wall, cpu = await pool_call_seconds(pool, request, calls)
                times[name].append(wall)
                times[f"{name}_cpu"].append(cpu)
        return times
    finally:
        if pool is not None:
            await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calls", nargs="?", type=int, default=1000, help="calls per round and configuration")
    parser.add_argument("--processes", type=int, default=get_settings().gatekeeper_processes,
                        help="helper processes of the pool (0: no pool)")
    options = parser.parse_args()
    result = validate("forager", TRAIT)
    if not result.ok:
        raise SystemExit(f"benchmark trait was rejected: {result.validation_log}")
    load = os.getloadavg()[0]
    busy, started = machine_busy_seconds(), time.perf_counter()
    times = asyncio.run(measure(options.calls, options.processes))
    busy_cores = (machine_busy_seconds() - busy) / (time.perf_counter() - started)
    median = {name: statistics.median(values) for name, values in times.items()}
    parse_seconds, validate_seconds = median["parse"], median["validate"]

    validations_per_sec = 1.0 / validate_seconds
    ast_parse_per_sec = 1.0 / parse_seconds
    report = {
        "benchmark": "gatekeeper",
        "trait_bytes": len(TRAIT.encode("utf-8")),
        "validations_per_sec": round(validations_per_sec, 1),
        "ast_parse_per_sec": round(ast_parse_per_sec, 1),
        "ratio_to_ast_parse": round(validations_per_sec / ast_parse_per_sec, 3),
        "target_validations_per_sec": TARGET_VALIDATIONS_PER_SEC,
        "meets_target": validations_per_sec >= TARGET_VALIDATIONS_PER_SEC,
        "validate_us": round(validate_seconds * 1e6, 1),
        "ast_parse_us": round(parse_seconds * 1e6, 1),
        "calls_per_round": options.calls,
        "rounds": ROUNDS,
        # Which build genesis.gatekeeper served, and the pure-Python module beside it.
        "implementation": "compiled" if gatekeeper.COMPILED else "python",
        "pure_python_validate_us": round(median["pure"] * 1e6, 1),
        "pure_python_validations_per_sec": round(1.0 / median["pure"], 1),
        "pure_python_ratio_to_ast_parse": round(parse_seconds / median["pure"], 3),
        "speedup_vs_pure_python": round(median["pure"] / validate_seconds, 2),
        "cpu_count": os.cpu_count(),
        "load_average_1m_at_start": round(load, 2),
        # Cores busy on the whole machine during the run (this run included): near cpu_count,
        # other work competed for them and the pool could not use both.
        "machine_cores_busy": round(busy_cores, 2),
    }
    if options.processes:
        pool_validate, pool_parse = median["pool_validate"], median["pool_parse"]
        report.update({
            "pool_processes": options.processes,
            "pool_in_flight": POOL_IN_FLIGHT,
            "pool_validations_per_sec": round(1.0 / pool_validate, 1),
            "pool_ast_parse_per_sec": round(1.0 / pool_parse, 1),
            "pool_ratio_to_ast_parse": round(pool_parse / pool_validate, 3),
            "pool_speedup_vs_single_process": round(validate_seconds / pool_validate, 2),
            "pool_meets_target": 1.0 / pool_validate >= TARGET_VALIDATIONS_PER_SEC,
            # CPU per validation (this process + helpers): what the pool can do with its cores free.
            "pool_cpu_us_per_validation": round(median["pool_validate_cpu"] * 1e6, 1),
            "pool_validations_per_sec_on_free_cores": round(
                min(options.processes, os.cpu_count() or 1) / median["pool_validate_cpu"], 1
            ),
        })
    print(json.dumps(report))


if __name__ == "__main__":
    main()
