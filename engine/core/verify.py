"""Verify a range of the world's history by replaying it: ``python -m engine.core.verify``.

From the latest kept snapshot at or before ``--from-tick`` the journal's records are replayed
(``engine.core.replay``: the live apply path, no trait host) through ``--to-tick``, each record's state
hash compared with the recorded one. The answer is one JSON object: ``equal`` true, or the first
divergent record with its tick and the entities and fields that differ. The chain of the records
read is checked too (sequence, parent hash, inputs hash). Progress goes to stdout as JSON lines
``{"progress": {...}}`` before it (the worker's activity turns them into heartbeats).

Ticks are those of the journal head's epoch: after a rollback, the ticks the world went through
again are checked as the new epoch lived them (the abandoned epoch's records, kept in the journal,
are replayed only where they lead up to the range's snapshot).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from journal.reader import JournalReader, archived_records
from journal.record import JournalCorrupt
from journal.snapshots import SnapshotStore

from .replay import Replay, ReplayError, base_snapshot, header_at

PROGRESS_EVERY_S = 0.5


def verify_range(
    journal_dir: Path,
    from_tick: int,
    to_tick: int,
    progress: Callable[[dict[str, Any]], None] | None = None,
    archive_dir: Path | None = None,
) -> dict[str, Any]:
    """``archive_dir``: the journal's archive (journal/retention.py), read for a range that
    starts before the journal's own oldest snapshot."""
    if from_tick < 0 or to_tick < from_tick:
        raise ReplayError(f"a range needs 0 <= from <= to (got {from_tick}..{to_tick})")
    archived = archived_records(archive_dir)
    reader = JournalReader(journal_dir / "records", archived)
    store = SnapshotStore(journal_dir / "snapshots")
    head = reader.head()
    if head is None:
        raise ReplayError(f"no journal in {journal_dir}")
    started = time.perf_counter()
    try:
        meta = base_snapshot(store, reader, from_tick, head)
    except ReplayError:
        if archived is None:
            raise
        store = SnapshotStore(archived.parent / "snapshots")
        meta = base_snapshot(store, reader, from_tick, head)
    replay = Replay.from_snapshot(store, meta, header_at(reader, meta.journal_seq))
    report: dict[str, Any] = {
        "equal": True,
        "from_tick": from_tick,
        "to_tick": to_tick,
        "epoch": head.epoch,
        "snapshot": meta.name,
        "snapshot_tick": meta.tick,
        "head_seq": head.seq,
        "head_tick": head.tick,
        "records_replayed": 0,
        "ticks_checked": 0,
        "first_tick_checked": None,
        "last_tick_checked": None,
        "ignored_records": 0,
        "divergence": None,
    }
    if from_tick > head.tick:
        raise ReplayError(f"the journal ends at tick {head.tick}: nothing to check from tick {from_tick}")
    epoch = meta.epoch
    next_progress = time.perf_counter() + PROGRESS_EVERY_S
    try:
        for record in reader.records(from_seq=meta.journal_seq + 1, to_seq=head.seq):
            h = record.header
            if h.epoch < epoch:  # a late record of an epoch a rollback abandoned: ignored
                report["ignored_records"] += 1
                continue
            epoch = h.epoch
            in_range = h.epoch == head.epoch and from_tick <= h.tick <= to_tick
            if h.epoch == head.epoch and h.tick > to_tick:
                break
            found = replay.check(record)
            report["records_replayed"] += 1
            if in_range and h.kind == "tick":
                report["ticks_checked"] += 1
                report["first_tick_checked"] = (
                    report["first_tick_checked"] if report["first_tick_checked"] is not None else h.tick
                )
                report["last_tick_checked"] = h.tick
            if found is not None:
                report["equal"] = False
                report["divergence"] = found.to_data()
                break
            if progress is not None and time.perf_counter() >= next_progress:
                next_progress = time.perf_counter() + PROGRESS_EVERY_S
                progress(
                    {"tick": replay.world.tick, "records_replayed": report["records_replayed"], "to_tick": to_tick}
                )
    except JournalCorrupt as exc:
        report["equal"] = False
        report["divergence"] = {"seq": exc.seq, "reason": f"the journal's chain breaks: {exc}"}
    elapsed = time.perf_counter() - started
    report["elapsed_sec"] = round(elapsed, 3)
    report["replay_ticks_per_second"] = round(report["records_replayed"] / elapsed, 1) if elapsed > 0 else 0.0
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.core.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("--journal", type=Path, required=True, help="the journal directory (GENESIS_JOURNAL_DIR)")
    parser.add_argument("--from-tick", type=int, required=True)
    parser.add_argument("--to-tick", type=int, required=True)
    parser.add_argument("--archive", type=Path, help="the journal's archive (GENESIS_JOURNAL_ARCHIVE_DIR), if any")
    args = parser.parse_args(argv)

    def progress(p: dict[str, Any]) -> None:
        print(json.dumps({"progress": p}), flush=True)

    try:
        report = verify_range(args.journal, args.from_tick, args.to_tick, progress, args.archive)
    except (ReplayError, JournalCorrupt) as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return 2
    print(json.dumps({"report": report}), flush=True)
    return 0 if report["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
