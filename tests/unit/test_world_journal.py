"""The world's journal through the engine (engine/process/journaling.py, engine/core/replay.py, engine/core/verify.py):
replay from snapshots with no trait host, save → load → continue, a killed engine, and divergences
named by tick, entity and field.

No service: the engines run a trusted in-process runner of three traits whose intents travel as
the trait host's do (tests/journal_worlds.py); their telemetry goes to a Redis nobody listens on.
The real trait host's journal is exercised in tests/stack/test_world_journal.py."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest

from engine.core.replay import KIND_TICK, Replay, ReplayError, header_at
from engine.core.verify import verify_range
from engine.core.world import World
from engine.process.journaling import WorldJournal
from journal.reader import JournalReader
from journal.snapshots import SnapshotStore
from tests.journal_worlds import LABELLER_LEAVES, LABELLER_RETURNS, journal_settings, run_journaled

ROOT = Path(__file__).resolve().parents[2]


def tick_hashes(journal_dir: Path) -> dict[int, bytes]:
    """World tick -> the state hash recorded after it (tick records only)."""
    return {
        r.header.tick: r.header.state_hash
        for r in JournalReader(journal_dir / "records").records()
        if r.header.kind == KIND_TICK
    }


@pytest.mark.parametrize("seed", [3, 29])
async def test_replay_from_every_snapshot_reproduces_every_later_state_hash(tmp_path, seed):
    """2,000 ticks with 3 live traits (one leaving and coming back as another version); then from
    each kept snapshot the rest of the journal is replayed with no trait host: every record's state
    hash comes out as recorded. (10,000 ticks with the real trait host: tests/stack/test_world_journal.py.)"""
    settings = journal_settings(tmp_path, seed, journal_snapshot_interval=500)
    engine = await run_journaled(settings, 2000)
    assert engine.trait_errors == 0
    reader = JournalReader(tmp_path / "records")
    assert reader.verify_chain().ok
    records = list(reader.records())
    ticks = [r for r in records if r.header.kind == KIND_TICK]
    assert len(ticks) == 2000 and ticks[-1].header.tick == 2000
    changes = [r.inputs["traits"] for r in ticks if "traits" in r.inputs]
    assert [c["active"] for c in changes] == [
        ["forager", "labeller", "wanderer"],
        ["forager", "wanderer"],
        ["forager", "labeller", "wanderer"],
    ]
    assert changes[1]["left"] == {"labeller": "deregistered"}
    assert changes[2]["versions"]["labeller"] == "mut_1abe02"
    assert any("intents" in r.inputs for r in ticks)
    store = SnapshotStore(tmp_path / "snapshots")
    metas = store.kept()
    assert [m.tick for m in metas] == [0, 500, 1000, 1500, 2000]
    for meta in metas:
        replay = Replay.from_snapshot(store, meta, header_at(reader, meta.journal_seq))
        checked = 0
        for record in reader.records(from_seq=meta.journal_seq + 1):
            assert replay.check(record) is None, f"from {meta.name}: record {record.header.seq}"
            checked += 1
        assert checked == records[-1].header.seq - meta.journal_seq
        assert replay.world.tick == 2000


async def test_save_load_continue_equals_the_uninterrupted_run(tmp_path):
    whole = tmp_path / "whole"
    await run_journaled(journal_settings(whole, 5), 900)
    parts = tmp_path / "parts"
    for ticks in (300, 1, 250, 349):  # stopped and started again, the labeller's change in between
        await run_journaled(journal_settings(parts, 5), ticks)
    assert tick_hashes(parts) == tick_hashes(whole)
    assert LABELLER_LEAVES < 900 < LABELLER_RETURNS + 600
    assert JournalReader(parts / "records").verify_chain().ok
    kinds = [r.header.kind for r in JournalReader(parts / "records").records()]
    assert kinds.count("engine.started") == 4 and kinds.count("world.created") == 1


async def test_a_perturbed_entity_is_reported_at_its_tick_with_entity_and_field(tmp_path):
    """A live run whose world changed outside its rules at tick 640 (one Molbot's energy): replay
    finds the first divergent tick and names the Molbot, the field and both values."""
    perturbed: dict[str, float] = {}

    class CosmicRay(World):
        def step(self, intents=None, lazy_write_back=False, forced=None):
            report = super().step(intents, lazy_write_back, forced)
            if self.tick == 640:
                eid = sorted(self.entities)[7]
                self.entities[eid].energy += 0.5
                self._columns = None  # as the world would see it had it changed through a rule
                perturbed.update(entity=eid, energy=self.entities[eid].energy)
            return report

    await run_journaled(journal_settings(tmp_path, 8), 900, world_cls=CosmicRay)
    report = verify_range(tmp_path, 0, 900)
    assert not report["equal"]
    div = report["divergence"]
    assert div["tick"] == 640 and div["kind"] == "tick"
    (energy,) = [d for d in div["differences"] if d["field"] == "energy"]
    assert energy["entity"] == perturbed["entity"]
    assert energy["recorded"] == perturbed["energy"] and energy["replayed"] == perturbed["energy"] - 0.5
    # before it, the range is equal
    assert verify_range(tmp_path, 0, 639)["equal"]


async def test_verify_reports_a_range_and_refuses_bad_ones(tmp_path):
    await run_journaled(journal_settings(tmp_path, 2), 1200)
    report = verify_range(tmp_path, 600, 1100)
    assert report["equal"] and report["divergence"] is None
    assert report["snapshot_tick"] == 500 and report["first_tick_checked"] == 600
    assert report["last_tick_checked"] == 1100 and report["ticks_checked"] == 501
    with pytest.raises(ReplayError, match="0 <= from <= to"):
        verify_range(tmp_path, 10, 5)
    with pytest.raises(ReplayError, match="ends at tick 1200"):
        verify_range(tmp_path, 5000, 6000)


async def test_a_killed_engine_restarts_from_its_last_snapshot_and_the_journal_tail(tmp_path):
    """An engine process killed at a random moment (SIGKILL: no clean-up): the next start restores
    the last snapshot, replays the records after it with the recorded hashes, and goes on exactly
    as an engine that was never killed."""
    rng = random.Random(int(time.time()))
    killed = tmp_path / "killed"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.journal_worlds",
        str(killed),
        "13",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None and (await proc.stdout.readline()).strip() == b"ticking"
        await asyncio.sleep(rng.uniform(1.0, 3.0))
    finally:
        proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 10)
    head = JournalReader(killed / "records").head()
    assert head is not None and head.tick > 100
    engine = await run_journaled(journal_settings(killed, 13), 200)  # open() checks every replayed hash
    assert engine.world.tick == head.tick + 200
    whole = tmp_path / "whole"
    await run_journaled(journal_settings(whole, 13), head.tick + 200)
    assert tick_hashes(killed) == tick_hashes(whole)


async def test_a_journal_that_does_not_replay_stops_the_engine_with_the_reason(tmp_path):
    """A valid chain whose recorded hashes do not follow from its inputs (or from its snapshots):
    the engine refuses to start on it and says where, rather than run a world it cannot vouch for."""
    await run_journaled(journal_settings(tmp_path, 4), 700)
    _rewrite_last_tick_hash(tmp_path)
    assert JournalReader(tmp_path / "records").verify_chain().ok  # the chain alone cannot tell
    with pytest.raises(ReplayError, match="does not match the journal"):
        WorldJournal.open(journal_settings(tmp_path, 4), World)
    report = verify_range(tmp_path, 500, 700)
    assert not report["equal"] and report["divergence"]["tick"] == 700


def _rewrite_last_tick_hash(journal_dir: Path) -> None:
    """Re-append the journal with the last tick record's state hash changed (a valid chain whose
    recorded history does not follow from its inputs)."""
    from journal.writer import JournalWriter

    records = list(JournalReader(journal_dir / "records").records())
    for path in (journal_dir / "records").glob("seg-*"):
        path.unlink()
    writer = JournalWriter.open(journal_dir / "records", fsync_interval_s=0)
    try:
        last_tick = max(i for i, r in enumerate(records) if r.header.kind == KIND_TICK)
        for i, r in enumerate(records):
            h = r.header
            state = bytes(32) if i == last_tick else h.state_hash
            writer.append(h.kind, h.epoch, h.tick, r.inputs, state)
    finally:
        writer.close()


async def test_a_journal_that_lost_records_from_its_end_is_refused(tmp_path):
    """The chain cannot tell that its last records are gone; a snapshot taken after them can."""
    from journal.framing import frames
    from journal.segments import segments

    await run_journaled(journal_settings(tmp_path, 6, journal_snapshot_interval=200), 500)
    (_, path), *_ = segments(tmp_path / "records")
    cut = [f.end for f in frames(path.read_bytes())][300]  # a clean cut after record 300
    path.write_bytes(path.read_bytes()[:cut])
    with pytest.raises(ReplayError, match="missing from the journal's end"):
        WorldJournal.open(journal_settings(tmp_path, 6), World)
