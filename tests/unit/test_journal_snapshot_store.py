"""The snapshot store beyond the round trip: its order, the latest snapshot before a journal
position, a crash at each step of a save or a prune, and a catalog that was tampered with."""

from __future__ import annotations

from dataclasses import replace

import pytest

from genesis import canonical
from journal.snapshots import CATALOG, SnapshotCorrupt, SnapshotStore
from tests.journal_files import meta


class Crash(BaseException):
    """The process dying at this point (nothing after it runs)."""


def test_list_is_by_epoch_then_tick_and_latest_follows_the_journal(tmp_path):
    store = SnapshotStore(tmp_path)
    a = store.save(meta(100, seq=100), {"t": 100})
    b = store.save(meta(200, seq=200), {"t": 200})
    c = store.save(meta(150, seq=260, epoch=1), {"t": 150})  # after a rollback to tick 150
    d = store.save(meta(300, seq=350, epoch=1), {"t": 300})
    assert [m.name for m in store.list()] == [a.name, b.name, c.name, d.name]
    assert [m.number for m in (a, b, c, d)] == [0, 1, 2, 3]
    assert store.latest() == d
    assert store.latest(max_seq=349) == c and store.latest(max_seq=260) == c
    assert store.latest(epoch=0) == b and store.latest(max_seq=199, epoch=0) == a
    assert store.latest(max_seq=99) is None and store.latest(epoch=2) is None
    assert SnapshotStore(tmp_path / "none").latest() is None


def test_a_crash_between_catalog_and_delete_leaves_a_stray_not_an_error(tmp_path, monkeypatch):
    store = SnapshotStore(tmp_path)
    names = [store.save(meta(t, seq=t), {"t": t}).name for t in range(5)]

    def crash(path, missing_ok=False):
        raise Crash

    with monkeypatch.context() as m:
        m.setattr("pathlib.Path.unlink", crash)
        with pytest.raises(Crash):
            store.prune(keep_last=2, keep_every=0, pinned=set())
    store = SnapshotStore(tmp_path)  # as the restarted process sees it
    assert [m.name for m in store.kept()] == names[3:]
    assert store.strays() == names[:3]
    assert store.prune(keep_last=2, keep_every=0, pinned=set()) == []
    assert all((tmp_path / n).exists() for n in names)
    assert store.load(names[4])[1] == {"t": 4}
    assert store.save(meta(5, seq=5), {"t": 5}).number == 5


def test_a_crash_before_the_catalog_names_a_snapshot_is_never_overwritten(tmp_path, monkeypatch):
    store = SnapshotStore(tmp_path)
    store.save(meta(10, seq=10), {"t": 10})
    with monkeypatch.context() as m:
        m.setattr(SnapshotStore, "_write_catalog", lambda self, metas: (_ for _ in ()).throw(Crash()))
        with pytest.raises(Crash):
            store.save(meta(20, seq=20), {"t": 20})
    [stray] = store.strays()
    before = (tmp_path / stray).read_bytes()
    again = store.save(meta(20, seq=20), {"t": 20})  # the same position after a restart
    assert again.name != stray and (tmp_path / stray).read_bytes() == before
    assert store.strays() == [stray] and store.load(again.name)[1] == {"t": 20}


def test_the_newest_snapshot_is_always_kept_so_numbers_never_repeat(tmp_path):
    store = SnapshotStore(tmp_path)
    saved = [store.save(meta(t, seq=t), {}) for t in range(3)]
    assert sorted(store.prune(keep_last=0, keep_every=0, pinned=set())) == [saved[0].name, saved[1].name]
    assert store.kept() == [saved[2]]
    assert store.save(meta(3, seq=3), {}).number == 3


def test_what_the_file_says_of_itself_must_match_the_catalog(tmp_path):
    store = SnapshotStore(tmp_path)
    saved = store.save(meta(30, seq=30), {"x": 1})
    forged = replace(saved, traits={"t": "mut_bbbbbb"})  # the file's digest kept, its meta changed
    (tmp_path / CATALOG).write_bytes(canonical.encode([forged.to_data()]))
    with pytest.raises(SnapshotCorrupt, match="differs from the catalog"):
        store.load(saved.name)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"name": "../../outside.gsn"}, "name must be"),
        ({"chain_head": bytes(31)}, "chain_head must be 32 bytes"),
        ({"journal_seq": -2}, "journal_seq must be an int"),
        ({"traits": {"t": 1}}, "traits must map"),
        ({"number": True}, "number must be an int"),
    ],
)
def test_a_tampered_catalog_is_refused_never_acted_on(tmp_path, change, words):
    store = SnapshotStore(tmp_path)
    saved = store.save(meta(30, seq=30), {})
    outside = tmp_path.parent / "outside.gsn"
    outside.write_bytes(b"not the store's")
    try:
        (tmp_path / CATALOG).write_bytes(canonical.encode([saved.to_data() | change]))
        with pytest.raises(SnapshotCorrupt, match=words):
            store.kept()
        with pytest.raises(SnapshotCorrupt):
            store.prune(keep_last=1, keep_every=0, pinned=set())
        assert outside.exists() and (tmp_path / saved.name).exists()
    finally:
        outside.unlink()


def test_a_catalog_of_another_shape_is_refused(tmp_path):
    store = SnapshotStore(tmp_path)
    (tmp_path / CATALOG).write_bytes(canonical.encode({"snapshots": []}))
    with pytest.raises(SnapshotCorrupt, match="must be a list"):
        store.kept()
    (tmp_path / CATALOG).write_bytes(canonical.encode([{"name": "snap-a.gsn"}]))
    with pytest.raises(SnapshotCorrupt, match="exactly the fields"):
        store.kept()


def test_a_meta_no_catalog_could_hold_is_refused_before_anything_is_written(tmp_path):
    store = SnapshotStore(tmp_path)
    store.save(meta(1), {})
    with pytest.raises(ValueError, match="state_hash must be 32 bytes"):
        store.save(replace(meta(2), state_hash=b"short"), {})
    assert len(store.kept()) == 1 and store.strays() == []
