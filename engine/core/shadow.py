"""A shadow run: what a change of the world's rules would do, run beside what the world did.

Two copies of the world are forked from one kept snapshot and run side by side for a window of
ticks through the live apply path (``engine.core.inputs``) on the same recorded inputs — the trait
host's intents, trait-set changes and settled rounds the journal holds for those ticks, so no
trait host and no agent code runs. The **baseline** keeps the parameters it had; the
**candidate** runs with the candidate's governed parameters from the first tick. (Recorded
parameter changes are left out of both: the comparison is of the two sets of rules.) Where the
journal holds fewer ticks than the window, both run on instinct for the rest.

The snapshot is the latest one of the head's epoch that a full window of recorded ticks follows,
else the latest one. The report — the snapshot, the window, and for each run its population
(start, minimum, mean, end), total energy, births, deaths by cause and end state hash, with the
differences — is deterministic: two runs of the same request give the same bytes, and its sha256
is what an approval binds to.

    python -m engine.core.shadow --journal DIR --ticks N --baseline JSON --candidate JSON
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from genesis import canonical
from genesis.world_params import ALLOWED
from journal.reader import JournalReader
from journal.snapshots import SnapshotMeta, SnapshotStore

from .inputs import TickInputs, apply
from .replay import KIND_TICK, ReplayError, load_world, tick_inputs
from .world import TickReport, World

REPORT_VERSION = 1


def with_params(world: World, params: dict[str, float]) -> World:
    """``world`` with governed parameters set (unknown names are refused)."""
    changes: dict[str, Any] = {}
    for name, value in sorted(params.items()):
        bounds = ALLOWED.get(name)
        if bounds is None:
            raise ReplayError(f"{name} is not a governed parameter")
        changes[name] = int(value) if bounds.integer else float(value)
    world.params = dataclasses.replace(world.params, **changes)
    return world


def pick_snapshot(store: SnapshotStore, reader: JournalReader, ticks: int) -> tuple[SnapshotMeta, int]:
    head = reader.head()
    if head is None:
        raise ReplayError("no journal to fork from")
    metas = [m for m in store.kept() if m.epoch == head.epoch and m.journal_seq <= head.seq]
    if not metas:
        raise ReplayError("no kept snapshot of the world's current epoch to fork from")
    full = [m for m in metas if m.tick + ticks <= head.tick]
    chosen = max(full or metas, key=lambda m: (m.journal_seq, m.number))
    return chosen, head.seq


class Run:
    """One side of the shadow: a world and what happened to it."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.start_population = world.population
        self.min_population = world.population
        self.population_sum = 0
        self.births = 0
        self.deaths: dict[str, int] = {}

    def tick(self, inputs: TickInputs) -> TickReport:
        report = apply(self.world, inputs)
        self.births += len(report.births) + len(report.respawned)
        for _, cause in report.deaths:
            self.deaths[cause] = self.deaths.get(cause, 0) + 1
        population = self.world.population
        self.min_population = min(self.min_population, population)
        self.population_sum += population
        return report

    def summary(self, ticks: int) -> dict[str, Any]:
        w = self.world
        return {
            "params": {name: getattr(w.params, name) for name in sorted(ALLOWED)},
            "population_start": self.start_population,
            "population_min": self.min_population,
            "population_mean": round(self.population_sum / ticks, 6) if ticks else float(w.population),
            "population_end": w.population,
            "energy_end": round(sum(e.energy for e in w.entities.values()), 6),
            "births": self.births,
            "deaths": dict(sorted(self.deaths.items())),
            "end_state_hash": w.state_hash(),
        }


def shadow(journal_dir: Path, ticks: int, baseline: dict[str, float], candidate: dict[str, float]) -> dict[str, Any]:
    """The report of a shadow run (see the module doc)."""
    if ticks < 1:
        raise ReplayError("a shadow runs at least one tick")
    store = SnapshotStore(journal_dir / "snapshots")
    reader = JournalReader(journal_dir / "records")
    meta, head_seq = pick_snapshot(store, reader, ticks)
    runs = {
        "baseline": Run(with_params(load_world(store, meta), baseline)),
        "candidate": Run(with_params(load_world(store, meta), candidate)),
    }
    recorded = 0
    tick = meta.tick
    for record in reader.records(from_seq=meta.journal_seq + 1, to_seq=head_seq):
        if record.header.kind != KIND_TICK or record.header.epoch != meta.epoch:
            continue
        if recorded >= ticks:
            break
        inputs = tick_inputs(record)
        if inputs.tick != tick:
            raise ReplayError(f"record {record.header.seq} holds tick {inputs.tick}, the shadow is at tick {tick}")
        inputs.params = None  # each side keeps its own rules
        for run in runs.values():
            run.tick(inputs)
        recorded += 1
        tick += 1
    while tick < meta.tick + ticks:  # past the journal's end: instinct only
        for run in runs.values():
            run.tick(TickInputs(tick=tick))
        tick += 1
    sides = {name: run.summary(ticks) for name, run in runs.items()}
    b, c = sides["baseline"], sides["candidate"]
    return {
        "version": REPORT_VERSION,
        "snapshot": meta.name,
        "epoch": meta.epoch,
        "from_tick": meta.tick,
        "ticks": ticks,
        "recorded_ticks": recorded,
        "baseline": b,
        "candidate": c,
        "differences": differences(b, c),
    }


def differences(baseline: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    """What the candidate's run did otherwise than the baseline's (two :meth:`Run.summary`)."""
    b, c = baseline, candidate
    return {
        "population_end": c["population_end"] - b["population_end"],
        "population_mean": round(c["population_mean"] - b["population_mean"], 6),
        "energy_end": round(c["energy_end"] - b["energy_end"], 6),
        "births": c["births"] - b["births"],
        "deaths": sum(c["deaths"].values()) - sum(b["deaths"].values()),
        "same_end_state": c["end_state_hash"] == b["end_state_hash"],
    }


def report_hash(report: dict[str, Any]) -> str:
    return hashlib.sha256(canonical.encode(report)).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--ticks", type=int, required=True)
    parser.add_argument("--baseline", default="{}", help="governed parameters of the baseline (JSON)")
    parser.add_argument("--candidate", default="{}", help="governed parameters of the candidate (JSON)")
    args = parser.parse_args()
    try:
        report = shadow(args.journal, args.ticks, json.loads(args.baseline), json.loads(args.candidate))
    except (ReplayError, ValueError) as exc:
        print(json.dumps({"error": str(exc)}))
        sys.exit(2)
    print(json.dumps({"report": report, "report_hash": report_hash(report)}, sort_keys=True))


if __name__ == "__main__":
    main()
