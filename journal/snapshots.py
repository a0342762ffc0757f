"""Snapshots bound to the journal: a world's data saved with the journal position it belongs to
(the sequence number and header hash of the last record applied), its state hash, the world
version and the live trait versions; restoring checks them all.

Files ``snap-e<epoch>-t<tick>-s<seq>.gsn`` hold zstd-compressed canonical CBOR ``{"meta", "world"}``,
written to a temporary name, fsynced and renamed. ``catalog.cbor`` lists the snapshots (rewritten
the same way): a file it does not list is not the store's and is never deleted. Retention keeps
the last N (at least the newest, so numbers never repeat), every Kth ever taken while it is young
enough, and the pinned ones (rollback points of open mutations): journal/retention.py."""

from __future__ import annotations

import builtins
import fcntl
import hashlib
import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import zstandard

from genesis import canonical

from .record import Header

log = logging.getLogger("genesis.journal")
CATALOG = "catalog.cbor"
_NAME = re.compile(r"^snap-[A-Za-z0-9-]+\.gsn$")
_META_FIELDS = ("epoch", "tick", "journal_seq", "chain_head", "state_hash", "world_version", "traits", "created_at")


class SnapshotCorrupt(Exception):
    """A snapshot whose file does not match what the catalog says of it."""


@dataclass(frozen=True)
class SnapshotMeta:
    name: str
    number: int  # 0, 1, 2, ... in the order taken, never reused
    epoch: int
    tick: int
    journal_seq: int  # the last journal record applied to the world (-1: none)
    chain_head: bytes  # that record's header hash
    state_hash: bytes
    world_version: str
    traits: dict[str, str]  # live trait -> mutation id
    created_at: float
    file_sha256: bytes
    size: int

    def to_data(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_data(cls, d: Any) -> SnapshotMeta:
        """A catalog entry, checked field by field (SnapshotCorrupt names what is wrong)."""
        if type(d) is not dict or set(d) != {f.name for f in fields(cls)}:
            raise SnapshotCorrupt(f"a {CATALOG} entry must have exactly the fields {[f.name for f in fields(cls)]}")
        meta = cls(**d)
        problem = meta.problem()
        if problem is not None:
            raise SnapshotCorrupt(f"{CATALOG} entry {d.get('name')!r}: {problem}")
        return meta

    def problem(self) -> str | None:
        """What makes this a meta no catalog may hold (None: nothing)."""
        if type(self.name) is not str or not _NAME.match(self.name):
            return "name must be snap-<letters, digits, dashes>.gsn"
        for key, least in (("number", 0), ("epoch", 0), ("tick", 0), ("journal_seq", -1), ("size", 0)):
            value = getattr(self, key)
            if type(value) is not int or value < least:
                return f"{key} must be an int of at least {least}"
        for key in ("chain_head", "state_hash", "file_sha256"):
            value = getattr(self, key)
            if type(value) is not bytes or len(value) != 32:
                return f"{key} must be 32 bytes"
        if type(self.world_version) is not str:
            return "world_version must be a str"
        if type(self.traits) is not dict or any(
            type(k) is not str or type(v) is not str for k, v in self.traits.items()
        ):
            return "traits must map trait names to mutation ids (str to str)"
        if type(self.created_at) is not float:
            return "created_at must be a float"
        return None

    def inner(self) -> dict[str, Any]:
        """What the file itself says of the snapshot."""
        return {k: getattr(self, k) for k in _META_FIELDS}


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` at ``path`` whole or not at all: a temporary name, fsynced, renamed, the directory fsynced."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def kept_snapshots(
    metas: builtins.list[SnapshotMeta], keep_last: int, keep_every: int, keep_ticks: int, pinned: set[str]
) -> tuple[set[str], set[str]]:
    """(kept, dropped for age): the names of ``metas`` (in the order taken) retention keeps — the
    last ``keep_last`` (at least the newest: a restart resumes from it, and the next number
    follows it), the ``pinned`` ones, and every ``keep_every``-th ever taken (0: none) while
    within ``keep_ticks`` of the newest tick (0: for ever) — and the ``keep_every``-th ones it
    drops only for their age."""
    if not metas:
        return set(), set()
    last = {m.name for m in metas[-max(keep_last, 1) :]}
    newest_tick = max(m.tick for m in metas)
    kept, aged = set(), set()
    for m in metas:
        periodic = keep_every > 0 and m.number % keep_every == 0
        young = keep_ticks == 0 or m.tick >= newest_tick - keep_ticks
        if m.name in last or m.name in pinned or (periodic and young):
            kept.add(m.name)
        elif periodic:
            aged.add(m.name)
    return kept, aged


def verify_against(meta: SnapshotMeta, header: Header) -> str | None:
    """Why the snapshot is not bound to this journal header (None: it is)."""
    if header.seq != meta.journal_seq:
        return f"it follows record {meta.journal_seq}, not {header.seq}"
    if header.hash() != meta.chain_head:
        return f"record {header.seq} in the journal is not the one it was taken after (chain head differs)"
    if header.state_hash != meta.state_hash:
        return f"its state hash differs from record {header.seq}'s"
    if header.epoch != meta.epoch:
        return f"it is of epoch {meta.epoch}, record {header.seq} of epoch {header.epoch}"
    return None


class SnapshotStore:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()

    # -- the catalog -------------------------------------------------------------------------

    def kept(self) -> builtins.list[SnapshotMeta]:
        """The catalog's snapshots in the order taken (by number)."""
        try:
            data = canonical.decode((self.directory / CATALOG).read_bytes())
        except FileNotFoundError:
            return []
        except canonical.NonCanonical as exc:
            raise SnapshotCorrupt(f"{CATALOG} does not decode: {exc}") from None
        if type(data) is not list:
            raise SnapshotCorrupt(f"{CATALOG} must be a list of snapshots")
        return sorted((SnapshotMeta.from_data(d) for d in data), key=lambda m: m.number)

    def kept_named(self, name: str) -> SnapshotMeta | None:
        """The kept snapshot called ``name``, if the catalog still holds it."""
        return next((m for m in self.kept() if m.name == name), None)

    def list(self) -> builtins.list[SnapshotMeta]:
        """The catalog's snapshots by epoch, then tick (then the order taken)."""
        return sorted(self.kept(), key=lambda m: (m.epoch, m.tick, m.number))

    def latest(self, max_seq: int | None = None, epoch: int | None = None) -> SnapshotMeta | None:
        """The snapshot furthest along the journal (the last taken among equals), of ``epoch``
        if given, taken at or before journal record ``max_seq`` if given; None if there is none."""
        metas = [
            m
            for m in self.kept()
            if (max_seq is None or m.journal_seq <= max_seq) and (epoch is None or m.epoch == epoch)
        ]
        return max(metas, key=lambda m: (m.journal_seq, m.number), default=None)

    def _write_catalog(self, metas: builtins.list[SnapshotMeta]) -> None:
        write_atomic(self.directory / CATALOG, canonical.encode([m.to_data() for m in metas]))

    def _exclusive(self):
        """One process changes the store at a time (the engine; tests may open a second store)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        f = open(self.directory / "LOCK", "a+")  # noqa: SIM115
        fcntl.flock(f, fcntl.LOCK_EX)
        return f

    # -- saving and loading -----------------------------------------------------------------

    def save(self, meta: SnapshotMeta, world: dict[str, Any]) -> SnapshotMeta:
        """Write ``world`` with ``meta`` (its name, number, digest and size are assigned here)."""
        with self._lock:
            lock = self._exclusive()
            try:
                metas = self.kept()
                number = metas[-1].number + 1 if metas else 0
                while True:  # past a file a crash left unlisted, never over it
                    name = f"snap-e{meta.epoch:04d}-t{meta.tick:012d}-s{meta.journal_seq:012d}-n{number}.gsn"
                    if not (self.directory / name).exists():
                        break
                    number += 1
                named = replace(meta, name=name, number=number, file_sha256=bytes(32), size=0)
                problem = named.problem()
                if problem is not None:
                    raise ValueError(f"snapshot meta: {problem}")
                body = canonical.encode({"meta": named.inner(), "world": world})
                data = zstandard.ZstdCompressor(level=3).compress(body)
                write_atomic(self.directory / name, data)
                saved = replace(named, file_sha256=hashlib.sha256(data).digest(), size=len(data))
                self._write_catalog([*metas, saved])
                return saved
            finally:
                lock.close()

    def load(self, name: str) -> tuple[SnapshotMeta, dict[str, Any]]:
        metas = {m.name: m for m in self.kept()}
        meta = metas.get(name)
        if meta is None:
            raise SnapshotCorrupt(f"snapshot {name!r} is not in the catalog")
        try:
            data = (self.directory / name).read_bytes()
        except FileNotFoundError:
            raise SnapshotCorrupt(f"snapshot {name}: its file is missing") from None
        if hashlib.sha256(data).digest() != meta.file_sha256:
            raise SnapshotCorrupt(f"snapshot {name}: the file's sha256 differs from the catalog's")
        try:
            content = canonical.decode(zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 31))
        except (zstandard.ZstdError, canonical.NonCanonical) as exc:
            raise SnapshotCorrupt(f"snapshot {name}: does not decode: {exc}") from None
        if type(content) is not dict or content.get("meta") != meta.inner():
            raise SnapshotCorrupt(f"snapshot {name}: what the file says of itself differs from the catalog")
        return meta, content["world"]

    # -- retention ---------------------------------------------------------------------------

    def prune(
        self,
        keep_last: int,
        keep_every: int,
        pinned: set[str],
        keep_ticks: int = 0,
        on_aged: Callable[[SnapshotMeta], None] | None = None,
    ) -> builtins.list[str]:
        """Delete the snapshots retention does not keep (:func:`kept_snapshots`); ``on_aged`` sees
        each ``keep_every``-th one that goes only for its age first (an archive adopts it). The
        catalog is rewritten first, then the files go; a file the catalog does not list is left
        alone (and logged)."""
        with self._lock:
            lock = self._exclusive()
            try:
                metas = self.kept()
                names, aged = kept_snapshots(metas, keep_last, keep_every, keep_ticks, pinned)
                gone = [m for m in metas if m.name not in names]
                if gone:
                    if on_aged is not None:
                        for m in gone:
                            if m.name in aged:
                                on_aged(m)
                    self._write_catalog([m for m in metas if m.name in names])
                    for m in gone:
                        try:
                            (self.directory / m.name).unlink()
                        except FileNotFoundError:
                            pass
                strays = self.strays()
                if strays:
                    log.warning("snapshots: %d file(s) the catalog does not list, left alone: %s", len(strays), strays)
                return [m.name for m in gone]
            finally:
                lock.close()

    def adopt(self, meta: SnapshotMeta, source: Path) -> None:
        """Take another store's snapshot file, as it is, under its own name and number (an
        archive's store keeps the numbers of the journal's)."""
        with self._lock:
            lock = self._exclusive()
            try:
                metas = [m for m in self.kept() if m.name != meta.name]
                data = source.read_bytes()
                if hashlib.sha256(data).digest() != meta.file_sha256:
                    raise SnapshotCorrupt(f"snapshot {meta.name}: the file's sha256 differs from the catalog's")
                write_atomic(self.directory / meta.name, data)
                self._write_catalog(sorted([*metas, meta], key=lambda m: m.number))
            finally:
                lock.close()

    def strays(self) -> builtins.list[str]:
        """Snapshot-like files the catalog does not list (left by a crash between a catalog
        rewrite and a delete, or put there by hand): never deleted here."""
        listed = {m.name for m in self.kept()}
        if not self.directory.is_dir():
            return []
        return sorted(p.name for p in self.directory.glob("snap-*.gsn") if p.name not in listed)
