"""The journal's files (journal/): frames, the hash chain, torn tails, one writer, snapshots and
their retention. Every way a record can be damaged or moved is caught at its exact sequence number."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from genesis import canonical
from journal.framing import Walk, frame, frames
from journal.reader import JournalReader, JournalTail
from journal.record import ZERO_HASH, Header, JournalCorrupt, JournalRecord, encode_record
from journal.segments import segments
from journal.snapshots import SnapshotCorrupt, SnapshotMeta, SnapshotStore, verify_against
from journal.writer import JournalLocked, JournalWriter
from tests.journal_files import N, frame_spans, inputs_of, meta, write

GOLDEN_FRAME = (
    "000000a100a26168a76373657100646b696e64647469636b647469636b016565706f636800657374617465582000000000000000000000"
    "0000000000000000000000000000000000000000000066696e7075747358202956b2cee8e54663cef11aac45368e3a869c862ed7a6fd2d"
    "ba3a408017ce3e0e66706172656e745820000000000000000000000000000000000000000000000000000000000000000061"
    "69a161780115676a34"
)


def test_a_record_has_a_fixed_encoding():
    """Length, flags (raw), canonical CBOR {h: header, i: inputs}, CRC: byte for byte."""
    header = Header(0, 0, "tick", 1, ZERO_HASH, canonical.digest({"x": 1}), bytes(32))
    payload = encode_record(JournalRecord(header, {"x": 1}))
    assert payload == canonical.encode({"h": header.to_data(), "i": {"x": 1}})
    assert frame(payload).hex() == GOLDEN_FRAME
    assert header.hash().hex() == "d4155b3e40754998b9b17b13fb5c25867df68fb7d485f68e45a078c3eb4078e1"


def test_records_read_back_in_order_across_segments(tmp_path):
    headers = write(tmp_path, segment_max_records=5)
    assert len(segments(tmp_path)) == 5
    records = list(JournalReader(tmp_path).records())
    assert [r.header for r in records] == headers
    assert [r.inputs for r in records] == [inputs_of(i) for i in range(N)]
    assert [r.header.seq for r in JournalReader(tmp_path).records(7, 12)] == list(range(7, 13))
    check = JournalReader(tmp_path).verify_chain()
    assert check.ok and check.checked == N and check.head == headers[-1]
    assert headers[1].parent_hash == headers[0].hash() and headers[0].parent_hash == ZERO_HASH


@pytest.mark.parametrize("segment_max_records", [5, 1000])
def test_a_flipped_byte_anywhere_fails_at_its_record(tmp_path, segment_max_records):
    write(tmp_path, segment_max_records=segment_max_records)
    spans = frame_spans(tmp_path)
    rng = random.Random(7)
    originals = {path: path.read_bytes() for path, _, _ in spans}
    for seq, (path, start, end) in enumerate(spans):
        # the length field, the flags, the payload and the CRC of each record
        for pos in {start, start + 3, start + 4, rng.randrange(start + 5, end - 4), end - 1}:
            data = bytearray(originals[path])
            data[pos] ^= 1 << rng.randrange(8)
            path.write_bytes(bytes(data))
            check = JournalReader(tmp_path).verify_chain()
            assert not check.ok and check.first_bad_seq == seq, (seq, pos - start, check)
            path.write_bytes(originals[path])
    assert JournalReader(tmp_path).verify_chain().ok


def frame_blobs(directory: Path) -> list[bytes]:
    return [path.read_bytes()[start:end] for path, start, end in frame_spans(directory)]


def rewrite(directory: Path, blobs: list[bytes], order: list[int]) -> None:
    """The journal's frames put back in another order (one segment)."""
    for _, path in segments(directory):
        path.unlink()
    (directory / "seg-00000000000000000000.gjl").write_bytes(b"".join(blobs[i] for i in order))


def test_a_deleted_duplicated_or_reordered_record_fails_at_its_sequence_number(tmp_path):
    write(tmp_path)
    blobs = frame_blobs(tmp_path)
    whole = list(range(N))
    cases = {
        "deleted 7": ([i for i in whole if i != 7], 7, "missing"),
        "duplicated 7": (whole[:8] + [7] + whole[8:], 8, "again"),
        "7 and 8 swapped": (whole[:7] + [8, 7] + whole[9:], 7, "missing"),
        "first deleted": (whole[1:], 0, "missing"),
    }
    for name, (order, bad, words) in cases.items():
        rewrite(tmp_path, blobs, order)
        check = JournalReader(tmp_path).verify_chain()
        assert not check.ok and check.first_bad_seq == bad and words in check.reason, (name, check)
        rewrite(tmp_path, blobs, whole)
        assert JournalReader(tmp_path).verify_chain().ok


def test_altered_inputs_with_a_valid_frame_fail_the_chain(tmp_path):
    write(tmp_path)
    spans = frame_spans(tmp_path)
    path, start, end = spans[10]
    records = list(JournalReader(tmp_path).records())
    forged = JournalRecord(records[10].header, {"tick": 10, "host": "ok"})
    data = path.read_bytes()
    path.write_bytes(data[:start] + frame(encode_record(forged)) + data[end:])
    check = JournalReader(tmp_path).verify_chain()
    assert not check.ok and check.first_bad_seq == 10 and "inputs hash" in check.reason
    # and a forged header that matches the forged inputs breaks the next record's parent link
    header = records[10].header
    relinked = Header(
        header.seq, 0, "tick", header.tick, header.parent_hash, canonical.digest(forged.inputs), header.state_hash
    )
    data = path.read_bytes()
    spans = frame_spans(tmp_path)
    _, start, end = spans[10]
    path.write_bytes(data[:start] + frame(encode_record(JournalRecord(relinked, forged.inputs))) + data[end:])
    check = JournalReader(tmp_path).verify_chain()
    assert not check.ok and check.first_bad_seq == 11 and "parent hash" in check.reason


def test_a_torn_tail_is_dropped_never_half_applied_and_the_chain_goes_on(tmp_path):
    headers = write(tmp_path)
    path, start, end = frame_spans(tmp_path)[-1]
    data = path.read_bytes()
    path.write_bytes(data[: start + (end - start) // 2])  # the last write cut in half
    reader = JournalReader(tmp_path)
    assert [r.header.seq for r in reader.records()] == list(range(N - 1)) and reader.torn_tail
    writer = JournalWriter.open(tmp_path, fsync_interval_s=0)
    try:
        assert writer.recovery.truncated_bytes == (end - start) // 2  # the half that was written
        assert writer.head == headers[-2]
        again = writer.append("tick", 0, N, {"tick": N - 1}, bytes(32))
    finally:
        writer.close()
    assert again.seq == N - 1 and again.parent_hash == headers[-2].hash()
    assert JournalReader(tmp_path).verify_chain().ok


def test_a_damaged_last_frame_is_not_taken_for_a_torn_tail(tmp_path):
    write(tmp_path)
    path, start, _ = frame_spans(tmp_path)[-3]
    data = bytearray(path.read_bytes())
    data[start : start + 4] = struct.pack(">I", 10_000_000)  # runs past the end, like a torn write
    path.write_bytes(bytes(data))
    check = JournalReader(tmp_path).verify_chain()
    assert not check.ok and check.first_bad_seq == N - 3
    with pytest.raises(JournalCorrupt, match=f"record {N - 3}"):
        JournalWriter.open(tmp_path)  # never "repaired" by cutting good records off


def test_a_tail_follows_the_journal_as_it_grows_without_walking_a_segment_again(tmp_path):
    writer = JournalWriter.open(tmp_path, fsync_interval_s=0, segment_max_records=7)
    try:
        headers = [writer.append("tick", 0, i + 1, inputs_of(i), bytes(32)) for i in range(10)]
        tail = JournalTail(tmp_path, from_seq=3)
        assert [r.header for r in tail.read(4)] == headers[3:7]  # up to a segment's end
        assert [r.header for r in tail.read(100)] == headers[7:10]  # on into the next segment
        assert tail.read(100) == [] and tail.next_seq == 10  # the journal's end: nothing, yet
        # a record it has passed, damaged now in its segment: a walk from the segment's start
        # stops there; the tail goes on from where it stood
        path, start, _ = frame_spans(tmp_path)[8]
        with path.open("r+b") as f:
            f.seek(start + 6)
            byte = f.read(1)
            f.seek(start + 6)
            f.write(bytes([byte[0] ^ 0xFF]))
        headers += [writer.append("tick", 0, i + 1, inputs_of(i), bytes(32)) for i in range(10, 16)]
        with pytest.raises(JournalCorrupt, match="record 8"):
            list(JournalReader(tmp_path).records(from_seq=10))
        assert [r.header for r in tail.read(100)] == headers[10:16]
        with path.open("r+b") as f:
            f.seek(start + 6)
            f.write(byte)
    finally:
        writer.close()
    # a record being written (half of its frame on disk) is left for the next read
    path, start, end = frame_spans(tmp_path)[-1]
    whole = path.read_bytes()
    path.write_bytes(whole[: start + (end - start) // 2])
    tail = JournalTail(tmp_path, from_seq=12)
    assert [r.header.seq for r in tail.read(100)] == [12, 13, 14]
    path.write_bytes(whole)
    assert [r.header.seq for r in tail.read(100)] == [15]
    # the chain is checked across reads: a record changed behind the tail's back is caught
    tail = JournalTail(tmp_path, from_seq=0)
    assert len(tail.read(15)) == 15
    data = bytearray(whole)
    data[start + 4] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt, match="record 15"):
        tail.read(100)
    tail.seek(3)
    assert tail.next_seq == 3 and [r.header.seq for r in tail.read(2)] == [3, 4]


def test_one_writer_per_journal(tmp_path):
    writer = JournalWriter.open(tmp_path)
    try:
        with pytest.raises(JournalLocked, match="another process"):
            JournalWriter.open(tmp_path)
    finally:
        writer.close()
    JournalWriter.open(tmp_path).close()


def test_frames_walk_reports_where_it_stopped():
    blob = frame(b"a" * 10) + frame(b"b" * 600)
    walk = Walk()
    assert [f.payload for f in frames(blob + blob[:7], walk)] == [b"a" * 10, b"b" * 600]
    assert walk.torn_at == len(blob) and walk.error is None


# -- snapshots ------------------------------------------------------------------------------


def test_snapshots_round_trip_exactly_and_refuse_tampering(tmp_path):
    store = SnapshotStore(tmp_path)
    world = {"x": [0.1, -0.0, 1e300, 5e-324], "n": 2**63, "s": "é"}
    saved = store.save(meta(30), world)
    assert saved.name.startswith("snap-e0000-t000000000030-") and saved.size == (tmp_path / saved.name).stat().st_size
    got_meta, got = store.load(saved.name)
    assert got == world and str(got["x"][1]) == "-0.0" and got_meta == saved
    data = bytearray((tmp_path / saved.name).read_bytes())
    data[len(data) // 2] ^= 0x40
    (tmp_path / saved.name).write_bytes(bytes(data))
    with pytest.raises(SnapshotCorrupt, match="sha256"):
        store.load(saved.name)
    with pytest.raises(SnapshotCorrupt, match="not in the catalog"):
        store.load("snap-nope.gsn")


def test_a_snapshot_is_bound_to_its_journal_record():
    header = Header(41, 0, "tick", 30, bytes(32), bytes(32), bytes([30]) * 32)
    bound = SnapshotMeta("n", 0, 0, 30, 41, header.hash(), header.state_hash, "1", {}, 0.0, b"", 0)
    assert verify_against(bound, header) is None
    assert "follows record 41" in verify_against(bound, Header(42, 0, "tick", 30, bytes(32), bytes(32), bytes(32)))
    other = Header(41, 0, "tick", 30, bytes([1]) * 32, bytes(32), bytes([30]) * 32)
    assert "chain head" in verify_against(bound, other)


def test_retention_keeps_the_last_every_kth_and_pinned_and_never_deletes_strays(tmp_path):
    store = SnapshotStore(tmp_path)
    names = [store.save(meta(t * 100, t), {"t": t}).name for t in range(12)]
    (tmp_path / "snap-stray-by-hand.gsn").write_bytes(b"not ours")
    (tmp_path / "notes.txt").write_text("mine")
    gone = store.prune(keep_last=3, keep_every=5, pinned={names[3]})
    kept = [m.name for m in store.kept()]
    assert kept == [names[i] for i in (0, 3, 5, 9, 10, 11)]
    assert sorted(gone) == sorted(set(names) - set(kept))
    assert all(not (tmp_path / n).exists() for n in gone) and all((tmp_path / n).exists() for n in kept)
    assert (tmp_path / "snap-stray-by-hand.gsn").exists() and (tmp_path / "notes.txt").exists()
    assert store.strays() == ["snap-stray-by-hand.gsn"]
    # numbers are never reused: the next is 12, whatever was pruned
    assert store.save(meta(1200, 12), {}).number == 12


def test_the_catalog_and_snapshot_files_are_written_whole(tmp_path):
    store = SnapshotStore(tmp_path)
    store.save(meta(1), {"a": 1})
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
