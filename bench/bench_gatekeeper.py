"""Gatekeeper throughput vs plain ``ast.parse`` of the same ~2 KB trait, in one process, in one run.

Usage: cd /work/main && .venv/bin/python bench/bench_gatekeeper.py [N]

Prints one JSON object. ``ratio_to_ast_parse`` is validations/s divided by ast.parse/s of the
same source (1.0 would mean validation costs no more than parsing), so it is comparable across
machines where absolute numbers are not. Measured in interleaved rounds (both see the same
machine load); the medians are reported.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gatekeeper import validate

TARGET_VALIDATIONS_PER_SEC = 2000
ROUNDS = 7

TRAIT = """\
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
"""


def per_call_seconds(function: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls


def measure(calls: int) -> dict[str, list[float]]:
    functions = {"parse": lambda: ast.parse(TRAIT), "validate": lambda: validate("forager", TRAIT)}
    for function in functions.values():  # warm caches and the allocator
        per_call_seconds(function, max(calls // 10, 10))
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(ROUNDS):
        for name, function in functions.items():
            times[name].append(per_call_seconds(function, calls))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calls", nargs="?", type=int, default=1000, help="calls per round and configuration")
    options = parser.parse_args()
    result = validate("forager", TRAIT)
    if not result.ok:
        raise SystemExit(f"benchmark trait was rejected: {result.validation_log}")
    load = os.getloadavg()[0]
    times = measure(options.calls)
    parse_seconds = statistics.median(times["parse"])
    validate_seconds = statistics.median(times["validate"])
    validations_per_sec = 1.0 / validate_seconds
    ast_parse_per_sec = 1.0 / parse_seconds
    print(
        json.dumps(
            {
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
                "cpu_count": os.cpu_count(),
                "load_average_1m_at_start": round(load, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
