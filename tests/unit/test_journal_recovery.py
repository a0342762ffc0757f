"""The journal after things went wrong: what a machine crash leaves at a segment's end, missing or
misnamed segments, a write the kernel took in part, a failed fsync. Losses at the end are torn
tails, cut off and continued from; everything else is reported at its sequence number."""

from __future__ import annotations

import os

import pytest

import journal.writer
from journal.reader import JournalReader
from journal.record import JournalCorrupt
from journal.segments import segment_name, segments
from journal.writer import JournalLocked, JournalWriteFailed, JournalWriter
from tests.journal_files import N, frame_spans, inputs_of, write


def continue_and_check(directory, expected_head_seq: int) -> None:
    """Reopen, append one record, and the whole chain checks out with no gap."""
    writer = JournalWriter.open(directory, fsync_interval_s=0)
    try:
        assert writer.head is not None and writer.head.seq == expected_head_seq
        parent = writer.head.hash()
        added = writer.append("tick", 0, 999, {"after": "recovery"}, bytes(32))
    finally:
        writer.close()
    assert added.seq == expected_head_seq + 1 and added.parent_hash == parent
    check = JournalReader(directory).verify_chain()
    assert check.ok and check.head == added and not check.torn_tail


@pytest.mark.parametrize("zeroed_from", ["frame start", "mid payload", "crc only"])
def test_zeros_a_machine_crash_left_at_the_end_are_a_torn_tail(tmp_path, zeroed_from):
    """The file's size reached the disk, its last data did not: zeros from somewhere in the
    last frame to the end (covering its CRC), maybe beyond it. Dropped, never half-applied."""
    write(tmp_path)
    path, start, end = frame_spans(tmp_path)[-1]
    cut = {"frame start": start, "mid payload": (start + end) // 2, "crc only": end - 4}[zeroed_from]
    data = path.read_bytes()
    path.write_bytes(data[:cut] + bytes(end - cut + 4096))
    reader = JournalReader(tmp_path)
    assert [h.seq for h in reader.headers()] == list(range(N - 1)) and reader.torn_tail
    check = JournalReader(tmp_path).verify_chain()
    assert check.ok and check.torn_tail and check.head is not None and check.head.seq == N - 2
    writer = JournalWriter.open(tmp_path, fsync_interval_s=0)
    writer.close()
    assert writer.recovery.truncated_bytes == len(data) + 4096 - start and writer.recovery.head_seq == N - 2
    continue_and_check(tmp_path, N - 2)


def test_zeros_that_leave_the_crc_standing_are_damage(tmp_path):
    """A run of zeros inside the last frame with its CRC intact is not what a crash leaves."""
    write(tmp_path)
    path, start, end = frame_spans(tmp_path)[-1]
    data = bytearray(path.read_bytes())
    data[start + 6 : end - 4] = bytes(end - 4 - start - 6)
    path.write_bytes(bytes(data))
    check = JournalReader(tmp_path).verify_chain()
    assert not check.ok and check.first_bad_seq == N - 1 and "CRC" in check.reason
    with pytest.raises(JournalCorrupt, match=f"record {N - 1}"):
        JournalWriter.open(tmp_path)


def test_missing_segments_are_reported_at_their_first_record(tmp_path):
    write(tmp_path, segment_max_records=5)
    segs = segments(tmp_path)
    saved = {path: path.read_bytes() for _, path in segs}
    for first, path in segs[:-1]:
        path.unlink()
        check = JournalReader(tmp_path).verify_chain()
        assert not check.ok and check.first_bad_seq == first and "missing" in check.reason, (first, check)
        path.write_bytes(saved[path])
    # from a later segment on, what comes before it is not read: its first record's parent is trusted
    segs[0][1].unlink()
    check = JournalReader(tmp_path).verify_chain(from_seq=10)
    assert check.ok and check.checked == N - 10


def test_a_range_is_read_without_touching_what_follows_it(tmp_path):
    write(tmp_path)
    path, start, _ = frame_spans(tmp_path)[20]
    data = bytearray(path.read_bytes())
    data[start + 9] ^= 0xFF
    path.write_bytes(bytes(data))
    assert [h.seq for h in JournalReader(tmp_path).headers(5, 9)] == [5, 6, 7, 8, 9]
    check = JournalReader(tmp_path).verify_chain(0, 19)
    assert check.ok and check.checked == 20 and check.head is not None and check.head.seq == 19
    assert JournalReader(tmp_path).verify_chain().first_bad_seq == 20


def test_an_empty_last_segment_is_continued_if_its_name_follows_the_head(tmp_path):
    """A crash after a new segment was created, before its first record."""
    write(tmp_path, n=10, segment_max_records=5)
    (tmp_path / segment_name(10)).touch()
    assert JournalReader(tmp_path).verify_chain().ok
    continue_and_check(tmp_path, 9)
    assert [first for first, _ in segments(tmp_path)] == [0, 5, 10]


def test_an_empty_last_segment_with_another_name_is_refused(tmp_path):
    write(tmp_path, n=10, segment_max_records=5)
    (tmp_path / segment_name(12)).touch()
    with pytest.raises(JournalCorrupt, match="record 10"):
        JournalWriter.open(tmp_path)
    check = JournalReader(tmp_path).verify_chain()
    assert not check.ok and check.first_bad_seq == 10 and "missing" in check.reason


def test_a_write_taken_in_part_is_cut_back_and_the_chain_goes_on(tmp_path, monkeypatch):
    write(tmp_path, n=5)
    writer = JournalWriter.open(tmp_path, fsync_interval_s=0)
    path = segments(tmp_path)[-1][1]
    size = path.stat().st_size
    real_write = os.write
    with monkeypatch.context() as m:
        m.setattr(journal.writer.os, "write", lambda fd, data: real_write(fd, data[: len(data) // 2]))
        with pytest.raises(JournalWriteFailed, match="of record 5"):
            writer.append("tick", 0, 6, inputs_of(5), bytes(32))
    assert path.stat().st_size == size and writer.head is not None and writer.head.seq == 4
    writer.close()
    continue_and_check(tmp_path, 4)


def test_an_exception_after_the_write_landed_keeps_the_record(tmp_path, monkeypatch):
    """A signal handler that raises once the kernel took the frame: the record is in the file,
    so the head moves on; the next append follows it, no sequence number used twice."""
    write(tmp_path, n=5)
    writer = JournalWriter.open(tmp_path, fsync_interval_s=0)
    real_write = os.write

    def write_then_interrupt(fd: int, data: bytes) -> int:
        real_write(fd, data)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(journal.writer.os, "write", write_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            writer.append("tick", 0, 6, inputs_of(5), bytes(32))
    assert writer.head is not None and writer.head.seq == 5
    writer.close()
    continue_and_check(tmp_path, 5)


def test_a_part_that_cannot_be_cut_off_stops_the_writer(tmp_path, monkeypatch):
    write(tmp_path, n=5)
    writer = JournalWriter.open(tmp_path, fsync_interval_s=0)
    real_write = os.write

    def no_truncate(fd: int, length: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(journal.writer.os, "write", lambda fd, data: real_write(fd, data[:10]))
        m.setattr(journal.writer.os, "ftruncate", no_truncate)
        with pytest.raises(JournalWriteFailed):
            writer.append("tick", 0, 6, inputs_of(5), bytes(32))
    with pytest.raises(JournalWriteFailed, match="takes no more records: record 5 was written in part"):
        writer.append("tick", 0, 6, inputs_of(5), bytes(32))
    writer.close()
    reopened = JournalWriter.open(tmp_path)
    reopened.close()
    assert reopened.recovery.truncated_bytes == 10
    continue_and_check(tmp_path, 4)


def test_a_failed_fsync_stops_the_writer(tmp_path, monkeypatch):
    """The kernel may drop pages it could not write: later records could follow a hole."""
    write(tmp_path, n=3)
    writer = JournalWriter.open(tmp_path, fsync_interval_s=0)

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(journal.writer.os, "fsync", failing_fsync)
        with pytest.raises(OSError, match="Input/output"):
            writer.append("tick", 0, 4, inputs_of(3), bytes(32))
    with pytest.raises(JournalWriteFailed, match="fsync failed"):
        writer.append("tick", 0, 5, inputs_of(4), bytes(32))
    writer.close()
    continue_and_check(tmp_path, 3)  # the record was written; only its fsync failed


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": ""},
        {"epoch": True},
        {"tick": -1},
        {"inputs": [1, 2]},
        {"inputs": {"x": float("nan")}},
        {"state_hash": bytes(31)},
    ],
)
def test_a_record_no_reader_would_accept_is_refused_before_it_is_written(tmp_path, bad):
    write(tmp_path, n=2)
    size = sum(path.stat().st_size for _, path in segments(tmp_path))
    writer = JournalWriter.open(tmp_path, fsync_interval_s=0)
    try:
        args = {"kind": "tick", "epoch": 0, "tick": 3, "inputs": {"x": 1}, "state_hash": bytes(32)} | bad
        with pytest.raises(ValueError):
            writer.append(**args)
        assert writer.head is not None and writer.head.seq == 1
    finally:
        writer.close()
    assert sum(path.stat().st_size for _, path in segments(tmp_path)) == size
    continue_and_check(tmp_path, 1)


def test_the_lock_names_the_process_holding_it(tmp_path):
    writer = JournalWriter.open(tmp_path)
    try:
        with pytest.raises(JournalLocked, match=f"pid {os.getpid()}"):
            JournalWriter.open(tmp_path)
    finally:
        writer.close()
