"""The journal's retention (journal/retention.py): which snapshots a policy keeps, which segments
may retire, and an archive that checks a segment's chain, reads back what it wrote, links each
segment to the one before and is read as one journal with what is left."""

from __future__ import annotations

import json

import pytest

from journal.reader import JournalReader, JournalTail
from journal.retention import Archive, ArchiveRefused, Segment, describe, remove, retirable
from journal.segments import segments
from journal.snapshots import SnapshotStore, kept_snapshots
from journal.writer import JournalWriter
from tests.journal_files import meta, write


def test_keep_every_snapshots_stay_only_while_young(tmp_path):
    store = SnapshotStore(tmp_path)
    names = [store.save(meta(t * 100, t), {"t": t}).name for t in range(12)]
    metas = store.kept()
    kept, aged = kept_snapshots(metas, keep_last=2, keep_every=3, keep_ticks=500, pinned={names[1]})
    # newest tick 1,100: the 3rd ones at ticks 600 and 900 are young; 0 and 300 go for their age
    assert kept == {names[i] for i in (1, 6, 9, 10, 11)}
    assert aged == {names[0], names[3]}
    forever, none_aged = kept_snapshots(metas, keep_last=2, keep_every=3, keep_ticks=0, pinned=set())
    assert forever == {names[i] for i in (0, 3, 6, 9, 10, 11)} and none_aged == set()


def test_prune_hands_the_aged_ones_to_the_archive_before_they_go(tmp_path):
    store = SnapshotStore(tmp_path / "live")
    archive = Archive(tmp_path / "archive")
    names = [store.save(meta(t * 100, t), {"t": t}).name for t in range(8)]
    gone = store.prune(2, 3, set(), keep_ticks=200, on_aged=lambda m: archive.adopt_snapshot(store, m))
    assert [m.name for m in store.kept()] == [names[6], names[7]]
    assert sorted(gone) == sorted(names[:6])
    assert [m.name for m in archive.snapshots.kept()] == [names[0], names[3]]
    _, world = archive.snapshots.load(names[3])
    assert world == {"t": 3}


def test_only_closed_segments_wholly_before_the_bound_retire(tmp_path):
    write(tmp_path, 24, segment_max_records=5)
    firsts = [first for first, _ in segments(tmp_path)]
    assert firsts == [0, 5, 10, 15, 20]
    assert [(s.first_seq, s.last_seq) for s in retirable(tmp_path, 12)] == [(0, 4), (5, 9)]
    assert [s.first_seq for s in retirable(tmp_path, 10)] == [0, 5]
    assert [s.first_seq for s in retirable(tmp_path, 1000)] == [0, 5, 10, 15]  # never the one being written
    assert retirable(tmp_path, 4) == []


def test_archived_segments_read_back_as_one_journal_with_the_rest(tmp_path):
    live, archive = tmp_path / "records", Archive(tmp_path / "archive")
    headers = write(live, 24, segment_max_records=5)
    retiring = retirable(live, 12)
    entries = [archive.add_segment(s) for s in retiring]
    assert [archive.add_segment(s) for s in retiring] == entries  # archived once: a retry finds it
    assert [first for first, _ in segments(live)] == [0, 5, 10, 15, 20]  # kept until their receipt
    for segment in retiring:
        remove(segment)
    assert [e.name for e in entries] == ["seg-00000000000000000000.gjl.zst", "seg-00000000000000000005.gjl.zst"]
    assert entries[1].last_hash == headers[9].hash().hex() and entries[1].first_tick == 6
    assert [first for first, _ in segments(live)] == [10, 15, 20]  # the originals are gone
    lines = [json.loads(line) for line in (archive.directory / "index.jsonl").read_text().splitlines()]
    assert [line["first_seq"] for line in lines] == [0, 5]
    # the live journal alone starts at record 10; with its archive it is whole from 0
    assert JournalReader(live).verify_chain(10).ok
    whole = JournalReader(live, archive.records).verify_chain(0)
    assert whole.ok and whole.checked == 24 and whole.head == headers[-1]
    assert archive.usage()["segments"] == 2 and archive.usage()["first_seq"] == 0


def test_a_segment_with_a_broken_chain_is_not_archived_or_removed(tmp_path):
    live, archive = tmp_path / "records", Archive(tmp_path / "archive")
    write(live, 12, segment_max_records=5)
    first = retirable(live, 12)[0]
    data = bytearray(first.path.read_bytes())
    data[40] ^= 0xFF  # inside the first record's frame
    first.path.write_bytes(bytes(data))
    with pytest.raises(ArchiveRefused, match="chain is not sound"):
        archive.add_segment(first)
    assert first.path.exists() and archive.entries() == []


def test_a_segment_that_does_not_follow_the_archive_is_refused(tmp_path):
    archive = Archive(tmp_path / "archive")
    write(tmp_path / "a", 12, segment_max_records=5)
    archive.add_segment(retirable(tmp_path / "a", 12)[0])  # records 0-4 of one journal
    other = tmp_path / "b"  # another journal: the same numbers, another chain (other states)
    writer = JournalWriter.open(other, fsync_interval_s=0, segment_max_records=5)
    try:
        for i in range(12):
            writer.append("tick", 0, i + 1, {"tick": i}, bytes([200 + i % 50]) * 32)
    finally:
        writer.close()
    (other / "seg-00000000000000000000.gjl").unlink()
    segment = Segment(5, 9, other / "seg-00000000000000000005.gjl")
    with pytest.raises(ArchiveRefused, match="does not follow the archive's record 4"):
        archive.add_segment(segment)
    assert segment.path.exists()


def test_a_segment_to_delete_is_described_for_its_receipt(tmp_path):
    headers = write(tmp_path, 12, segment_max_records=5)
    segment = retirable(tmp_path, 12)[0]
    gone = describe(segment)
    assert (gone.first_seq, gone.last_seq, gone.last_hash) == (0, 4, headers[4].hash().hex())
    remove(segment)
    assert gone.archived_bytes == 0 and [first for first, _ in segments(tmp_path)] == [5, 10]


def test_a_tail_whose_segment_retired_goes_on_from_its_next_record(tmp_path):
    headers = write(tmp_path, 12, segment_max_records=5)
    tail = JournalTail(tmp_path)
    assert [r.header.seq for r in tail.read(5)] == [0, 1, 2, 3, 4]  # it stands at the end of the first segment
    remove(retirable(tmp_path, 5)[0])
    assert [r.header.seq for r in tail.read(100)] == list(range(5, 12))
    assert tail.next_seq == 12 and headers[-1].seq == 11
