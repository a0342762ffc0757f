"""Journaled worlds for tests: engines with a journal of their own and a trusted, in-process runner
of three traits whose intents travel the way the trait host's do (encoded as its columns and
decoded by ``genesis.trait_wire``), so the journal records what the live engine records.

Also runnable as a process that ticks until it is killed:
``python -m tests.journal_worlds JOURNAL_DIR SEED`` (the killed-engine test)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from cli.processes import free_port
from engine.process.loop import Engine
from engine.process.telemetry import TelemetrySink
from genesis.config import Settings
from genesis.trait_wire import IntentColumns, decode_intent_groups
from sandbox.traithost import wire as trait_host

TRAITS = ("forager", "labeller", "wanderer")
LABELLER_LEAVES, LABELLER_RETURNS = 150, 400  # a trait-set change journaled in every run
MUTATION_HEX = {"forager": "f0a00", "labeller": "1abe0", "wanderer": "3a0de"}  # + the version: mut_1abe01


class ThreeTraits:
    """Live traits from the first tick: ``forager`` heads for food and eats, ``wanderer`` turns by
    its age, ``labeller`` names its state after its energy (away between two ticks)."""

    def __init__(self, agents: dict[str, str] | None = None) -> None:
        self.engine: Engine | None = None
        self.agents = agents or {t: f"agent-{t}" for t in TRAITS}  # trait -> the agent whose version runs

    def active_traits(self) -> list[str]:
        tick = self.engine.world.tick if self.engine is not None else 0
        away = LABELLER_LEAVES <= tick < LABELLER_RETURNS
        return [t for t in TRAITS if not (t == "labeller" and away)]

    def mutation_ids(self) -> dict[str, str]:
        tick = self.engine.world.tick if self.engine is not None else 0
        # the labeller comes back as another version
        back = tick >= LABELLER_RETURNS
        return {t: f"mut_{MUTATION_HEX[t]}{'2' if t == 'labeller' and back else '1'}" for t in TRAITS}

    def agent_ids(self) -> dict[str, str]:
        return dict(self.agents)

    async def run_tick(self, tick: int, batches: dict[str, list[dict]]) -> IntentColumns:
        merged: dict[int, list[list[Any]]] = {}
        for view in batches.get("forager", []):
            near = view["nearest_resource"]
            if near is not None:
                merged.setdefault(view["id"], []).extend(
                    [["move_towards", view["x"] + near[0], view["y"] + near[1]], ["eat"]]
                )
        for view in batches.get("wanderer", []):
            merged.setdefault(view["id"], []).append(["set", "direction", (view["age"] % 63) / 10.0])
        for view in batches.get("labeller", []):
            label = "hungry" if view["energy"] < 40 else "fed"
            merged.setdefault(view["id"], []).append(["set", "state", label])
        return decode_intent_groups([trait_host.encode_intents(merged)])

    async def refresh(self) -> None:
        return None

    async def close(self) -> None:
        return None


def journal_settings(journal_dir: Path, seed: int, **changes: Any) -> Settings:
    base: dict[str, Any] = {
        "engine_seed": seed,
        "engine_initial_population": 40,
        "engine_min_population": 15,
        "engine_max_population": 60,
        "engine_trait_gain_chance": 1.0,
        "engine_metrics_port": 0,
        "journal_dir": journal_dir,
        "journal_snapshot_interval": 500,
        "journal_fsync_interval_s": 1.0,
    }
    base.update(changes)
    return Settings().override(**base)


def unreachable_sink() -> TelemetrySink:
    return TelemetrySink(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens: writes fail, counted


def journaled_engine(settings: Settings, world_cls: Any = None, agents: dict[str, str] | None = None) -> Engine:
    """An engine on the journal of ``settings`` (resumed if it has records), with ThreeTraits."""
    from engine.core.model import world_params
    from engine.process.journaling import WorldJournal

    def new_world():
        cls = world_cls
        if cls is None:
            from engine.core.world import World as cls
        world = cls(world_params(settings.engine), seed=settings.engine.seed)
        return world

    journal, world = WorldJournal.open(settings, new_world)
    runner = ThreeTraits(agents)
    engine = Engine(settings, runner, world=world, journal=journal, sink=unreachable_sink())
    runner.engine = engine
    return engine


async def run_journaled(settings: Settings, ticks: int, world_cls: Any = None) -> Engine:
    engine = journaled_engine(settings, world_cls)
    try:
        await engine.run_ticks(ticks)
    finally:
        await engine.close()
        engine.journal.close()
    return engine


async def _run_until_killed(journal_dir: Path, seed: int) -> None:
    engine = journaled_engine(journal_settings(journal_dir, seed, engine_fast_forward=True))
    await engine.start()
    print("ticking", flush=True)
    while True:
        await engine.tick_once()
        await asyncio.sleep(0)


if __name__ == "__main__":
    asyncio.run(_run_until_killed(Path(sys.argv[1]), int(sys.argv[2])))
