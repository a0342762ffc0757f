"""The shadow runs of ``--entities`` Molbots over ``--ticks`` ticks, timed, in one run: a
governance proposal's and a held mutation's.

Journals a world of N Molbots (bench/engine.py's density, population pinned at N, every Molbot
carrying two of its gatekept traits) through the engine's own journal for ``--ticks`` + 300 ticks,
with an in-process runner that sends every Molbot a move and a state each tick (so the journal
holds real intents, as a live world's does). Then:

- ``engine.core.shadow`` over ``--ticks`` recorded ticks with a candidate that changes two governed
  parameters, twice: its seconds (baseline and candidate side by side) against the target (at
  most 10 s for 600 ticks of 500 Molbots), the ticks per second of each side against the live
  world's unpaced step rate, and whether the two runs gave the same report bytes;
- a held mutation's shadow (``activities.trait_shadow``): the two traits live and the third as
  the new trait, each side's traits in a real trait-host container, twice: its seconds against
  the same target, and whether the two runs gave the same report.

Prints one JSON object. It fails loudly when the governance shadow did not run on recorded inputs
for the whole window, or when a trait shadow's host missed a tick, a trait erred or did not run.

    python -m bench.shadow [--entities 500] [--ticks 600]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from bench.engine import build_world, validated_traits
from genesis.config import Settings
from genesis.trait_wire import decode_intent_groups
from sandbox.traithost import wire as trait_host

TARGET_S = 10.0


class Steering:
    """Every Molbot that carries one of ``names`` turns by its age and names its energy: intents
    on every tick."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def active_traits(self) -> list[str]:
        return list(self.names)

    async def run_tick(self, tick: int, batches: dict[str, list[dict]]):
        merged = {
            v["id"]: [
                ["set", "direction", (v["age"] % 63) / 10.0],
                ["set", "state", "low" if v["energy"] < 40 else "ok"],
            ]
            for name in self.names
            for v in batches.get(name, [])
        }
        return decode_intent_groups([trait_host.encode_intents(merged)])

    async def refresh(self) -> None:
        return None

    async def close(self) -> None:
        return None


async def journal_world(journal_dir: Path, n: int, ticks: int, names: list[str]) -> float:
    """Journal ``ticks`` ticks of an N-Molbot world; the live step rate (ticks/s, unpaced)."""
    from cli.processes import free_port
    from engine.process.journaling import WorldJournal
    from engine.process.loop import Engine
    from engine.process.telemetry import TelemetrySink

    settings = Settings().override(
        journal_dir=journal_dir, journal_snapshot_interval=300, engine_fast_forward=True, engine_metrics_port=0
    )
    journal, world = WorldJournal.open(settings, lambda: build_world(n, names, 5))
    sink = TelemetrySink(f"redis://127.0.0.1:{free_port()}/0")  # nobody listens: nothing is published
    engine = Engine(settings, Steering(names), world=world, journal=journal, sink=sink)
    try:
        started = time.perf_counter()
        await engine.run_ticks(ticks)
        rate = ticks / (time.perf_counter() - started)
    finally:
        await engine.close()
        journal.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, default=500)
    parser.add_argument("--ticks", type=int, default=600)
    args = parser.parse_args()
    from engine.core.shadow import report_hash, shadow

    *live, held = validated_traits(3)
    with tempfile.TemporaryDirectory(prefix="bench-shadow-") as tmp:
        journal_dir = Path(tmp)
        names = [e.trait_name for e in live]
        live_rate = asyncio.run(journal_world(journal_dir, args.entities, args.ticks + 300, names))
        candidate = {"resource_energy": 40.0, "base_metabolism": 0.03}
        runs = []
        for _ in range(2):
            started = time.perf_counter()
            report = shadow(journal_dir, args.ticks, {}, candidate)
            runs.append((time.perf_counter() - started, report_hash(report), report))
        trait_runs = trait_shadows(journal_dir, args.ticks, live, held)
    elapsed, first_hash, report = runs[0]
    if report["recorded_ticks"] != args.ticks:
        raise SystemExit(f"the shadow ran {report['recorded_ticks']} of {args.ticks} ticks on recorded inputs")
    if report["baseline"]["population_start"] != args.entities:
        raise SystemExit(f"the shadow forked a world of {report['baseline']['population_start']} Molbots")
    target = TARGET_S * (args.ticks / 600) * (args.entities / 500)
    out = {
        "entities": args.entities,
        "ticks": args.ticks,
        "shadow_s": round(elapsed, 3),
        "shadow_s_second_run": round(runs[1][0], 3),
        "target_s": target,
        "shadow_vs_target": round(elapsed / target, 3),
        "side_ticks_per_second": round(2 * args.ticks / elapsed, 1),
        "live_ticks_per_second_unpaced": round(live_rate, 1),
        "same_report_bytes": first_hash == runs[1][1],
        "report_hash": first_hash,
        "differences": report["differences"],
    }
    if not out["same_report_bytes"]:
        raise SystemExit("two shadow runs of one request gave different reports")
    (trait_s, trait_hash, trait_report), (second_s, second_hash, _) = trait_runs
    out["trait_shadow"] = {
        "live_traits": [e.trait_name for e in live],
        "held_trait": held.trait_name,
        "shadow_s": round(trait_s, 3),
        "shadow_s_second_run": round(second_s, 3),
        "shadow_vs_target": round(trait_s / target, 3),
        "same_report_bytes": trait_hash == second_hash,
        "carriers": trait_report["candidate"]["carriers"],
        "differences": trait_report["differences"],
    }
    print(json.dumps(out, indent=2))


def trait_shadows(journal_dir: Path, ticks: int, live: list, held) -> list[tuple[float, str, dict]]:
    """A held mutation's shadow, twice: (seconds, report hash, report) of each run. Fails when a
    side was not whole (a missed tick, a trait error) or a trait did not run."""
    import docker

    from activities.trait_shadow import run_trait_shadow
    from engine.core.shadow import report_hash
    from genesis.dto import TraitShadowRequest

    request = TraitShadowRequest(
        mutation_id="mut_benchheld",
        agent_id="agent-held",
        trait_name=held.trait_name,
        class_name=held.class_name,
        code=held.code,
        code_hash=held.code_hash,
    )
    settings = Settings().override(journal_dir=journal_dir)
    client = docker.from_env(timeout=60)
    runs = []
    try:
        for _ in range(2):
            started = time.perf_counter()
            report = run_trait_shadow(request, settings, client, live, ticks)
            runs.append((time.perf_counter() - started, report_hash(report), report))
    finally:
        client.close()
    for side in ("baseline", "candidate"):
        s = runs[0][2][side]
        if s["missed_ticks"] or s["unloadable"]:
            raise SystemExit(f"the trait shadow's {side} was not whole: {s['missed_ticks']} missed, {s['unloadable']}")
        for name, t in s["traits"].items():
            if t["errors"] or t["timeouts"] or not t["calls"]:
                raise SystemExit(f"trait {name} on the {side} side: {t}")
    return runs


if __name__ == "__main__":
    main()
