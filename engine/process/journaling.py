"""The engine's side of the journal: every tick's inputs appended with the state they led to,
snapshots bound to the journal, and the world brought back from them when the engine starts.

The engine is the journal's only writer. A record is appended once the tick's state hash is known;
the engine computes it while the trait host works on the next tick (``Engine._while_waiting``),
before anything can change the world again. Snapshots are built on the tick (a copy of the
world's data) and compressed and written in a worker thread. At start, the latest snapshot of the
journal head's epoch is loaded and the records after it replayed (``engine.core.replay``): the world
continues exactly where the journal ends, with the same hashes, or the engine refuses to start
and says where the journal and its snapshots disagree.

A failure to journal is fatal to the engine (it exits and is restarted from the journal): a world
that ran on unrecorded could never be replayed or audited.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from engine.core.inputs import TickInputs
from engine.core.replay import (
    KIND_CREATED,
    KIND_ROLLBACK,
    KIND_TICK,
    WORLD_VERSION,
    Replay,
    ReplayError,
    base_snapshot,
    header_at,
)
from engine.core.state_digest import ConstantColumns, Digest, TextCodes
from engine.core.world import World
from genesis import canonical
from genesis.config import Settings
from journal import retention
from journal.reader import JournalReader
from journal.record import ZERO_HASH, Header
from journal.snapshots import SnapshotMeta, SnapshotStore
from journal.writer import JournalWriter

log = logging.getLogger("genesis.engine.journal")

KIND_STARTED = "engine.started"
PINS_FILE = "pins.cbor"


class JournalMismatch(ReplayError):
    """The journal's head cannot be reached from its snapshots with the recorded hashes."""


class WorldJournal:
    def __init__(self, settings: Settings, writer: JournalWriter, store: SnapshotStore) -> None:
        self.settings = settings
        self.writer = writer
        self.store = store
        self.constants = ConstantColumns()
        self.text_codes = TextCodes()
        self.snapshot_interval = settings.journal.snapshot_interval
        self.records = 0
        self.append_s = 0.0
        self.snapshots_saved = 0
        self.last_snapshot: SnapshotMeta | None = None
        self.restored_from: SnapshotMeta | None = None  # the snapshot the world was restored from at open
        self.replayed = 0  # records replayed after it
        self.versions: dict[str, str] = {}  # the live trait versions the journal ends with
        self._saving: concurrent.futures.Future | None = None
        self._snapshot_at: tuple[int, int] | None = None  # (epoch, tick) of the last snapshot taken
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="journal-snapshots")
        self._pins_path = store.directory / PINS_FILE
        self.pins: dict[str, str] = self._read_pins()  # mutation id -> the snapshot it would roll back to
        # What the journal keeps: the settings' until the manifest in force is read (engine/process/retention.py)
        self.policy = retention.Policy(keep_last=settings.journal.keep_last, keep_every=settings.journal.keep_every)
        self.archive = retention.Archive(settings.journal_archive_dir)

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, settings: Settings, new_world: Callable[[], World]) -> tuple[WorldJournal, World]:
        """The journal under ``settings.journal_dir`` and the world it ends with (a new world,
        recorded, when the journal is empty). ``restored``/``replayed`` say how it was reached."""
        directory = settings.journal_dir
        writer = JournalWriter.open(
            directory / "records",
            segment_max_records=settings.journal.segment_records,
            fsync_interval_s=settings.journal.fsync_interval_s,
        )
        try:
            journal = cls(settings, writer, SnapshotStore(directory / "snapshots"))
            if writer.recovery.truncated_bytes:
                log.warning(
                    "journal: dropped a torn record at its end (%d bytes, written when the engine stopped)",
                    writer.recovery.truncated_bytes,
                )
            head = writer.head
            if head is None:
                world = new_world()
                journal.append_created(world)
                journal.save_snapshot(world, {}, wait=True)
            else:
                world = journal.restore(head)
        except BaseException:
            writer.close()
            raise
        return journal, world

    def append_started(self, world: World, run_id: str) -> Header:
        """The engine's start, with how its world was reached."""
        body = {
            "run_id": run_id,
            "snapshot": self.restored_from.name if self.restored_from is not None else "",
            "replayed_records": self.replayed,
            "world_version": WORLD_VERSION,
        }
        return self.append_event(KIND_STARTED, world, body)

    def restore(self, head: Header) -> World:
        """The world at the journal's head: its base snapshot and every record after it replayed."""
        reader = JournalReader(self.writer_directory)
        beyond = [m for m in self.store.kept() if m.journal_seq > head.seq]
        if beyond:  # the chain cannot see records lost from its end; a snapshot taken after them can
            raise JournalMismatch(
                f"the journal ends at record {head.seq}, but snapshot {beyond[0].name} was taken after record "
                f"{beyond[0].journal_seq}: records are missing from the journal's end. Restore them, or move "
                f"{self.settings.journal_dir} away to start a new world."
            )
        meta = base_snapshot(self.store, reader, None, head)
        replay = Replay.from_snapshot(self.store, meta, header_at(reader, meta.journal_seq))
        replayed = 0
        started = time.perf_counter()
        for record in reader.records(from_seq=meta.journal_seq + 1, to_seq=head.seq):
            found = replay.check(record)
            if found is not None:
                raise JournalMismatch(
                    f"replaying the journal from snapshot {meta.name} diverges at record {found.seq} "
                    f"(tick {found.tick}): "
                    f"{[d.to_data() for d in found.differences]}. Check it with `genesis world replay`; to start a new "
                    f"world instead, move {self.settings.journal_dir} away."
                )
            replayed += 1
        world = replay.world
        self.versions = replay.versions
        self.constants, self.text_codes = replay.constants, replay.text_codes
        self.last_snapshot = self.restored_from = meta
        self._snapshot_at = (meta.epoch, meta.tick) if meta.journal_seq == head.seq else None
        self.replayed = replayed
        log.info(
            "journal: world restored at tick %d (epoch %d, record %d) from snapshot %s and %d record(s) in %.2f s",
            world.tick,
            head.epoch,
            head.seq,
            meta.name,
            replayed,
            time.perf_counter() - started,
        )
        return world

    @property
    def writer_directory(self) -> Path:
        return self.settings.journal_dir / "records"

    # -- appending -------------------------------------------------------------------------

    @property
    def head(self) -> Header | None:
        return self.writer.head

    @property
    def epoch(self) -> int:
        head = self.writer.head
        return head.epoch if head is not None else 0

    def digest(self, world: World) -> Digest:
        return world.state_digest(self.constants, self.text_codes)

    def _append(
        self, kind: str, world: World, body: dict[str, Any], digest: Digest | None = None, started: float | None = None
    ) -> Header:
        """Append a record; ``append_s`` counts its time from ``started`` (default: now), the
        state digest included."""
        started = time.perf_counter() if started is None else started
        d = digest if digest is not None else self.digest(world)
        header = self.writer.append(kind, self.epoch, world.tick, body, d.state_hash)
        self.records += 1
        self.append_s += time.perf_counter() - started
        return header

    def append_created(self, world: World) -> Header:
        body = {"seed": world.seed, "params": asdict(world.params), "world_version": WORLD_VERSION}
        return self._append(KIND_CREATED, world, body)

    def append_event(self, kind: str, world: World, body: dict[str, Any]) -> Header:
        """A record that notes an event and leaves the world as it is."""
        return self._append(kind, world, body)

    def append_tick(self, world: World, inputs: TickInputs) -> Header:
        """The record of a tick just stepped: its inputs, and the probe and hash of the state after
        it (``world`` is that state)."""
        started = time.perf_counter()
        d = self.digest(world)
        body = inputs.to_data()
        body["probe"] = d.probe
        return self._append(KIND_TICK, world, body, d, started)

    # -- snapshots -------------------------------------------------------------------------

    def snapshot_due(self, world: World) -> bool:
        return world.tick % self.snapshot_interval == 0 and not self.has_snapshot_of(world)

    def has_snapshot_of(self, world: World) -> bool:
        """Whether a snapshot of the world as it is now was taken (or is being written)."""
        return self._snapshot_at == (self.epoch, world.tick)

    def save_snapshot(self, world: World, traits: dict[str, str], wait: bool = False) -> None:
        """A snapshot of ``world`` as the journal's head left it: the data is copied now, compressed
        and written in a worker thread (one at a time: a snapshot still being written when the
        next is due is waited for)."""
        head = self.writer.head
        meta = SnapshotMeta(
            name="",
            number=-1,
            epoch=self.epoch,
            tick=world.tick,
            journal_seq=head.seq if head is not None else -1,
            chain_head=head.hash() if head is not None else ZERO_HASH,
            state_hash=head.state_hash if head is not None else self.digest(world).state_hash,
            world_version=WORLD_VERSION,
            traits=dict(sorted(traits.items())),
            created_at=time.time(),
            file_sha256=b"",
            size=0,
        )
        data = world.snapshot()
        self._snapshot_at = (meta.epoch, meta.tick)
        self.wait_for_snapshot()
        self._saving = self._pool.submit(self._save, meta, data)
        if wait:
            self.wait_for_snapshot()

    def _save(self, meta: SnapshotMeta, data: dict[str, Any]) -> SnapshotMeta:
        saved = self.store.save(meta, data)
        self.last_snapshot = saved
        self.snapshots_saved += 1
        self._prune()
        return saved

    def _prune(self) -> None:
        """Snapshots retention no longer keeps go; in the archive, those that go for their age."""
        policy, pinned = self.policy, set(self.pins.values())
        adopt = (lambda meta: self.archive.adopt_snapshot(self.store, meta)) if policy.segments == "archive" else None
        deleted = self.store.prune(policy.keep_last, policy.keep_every, pinned, policy.keep_ticks, on_aged=adopt)
        if deleted:
            log.debug("journal: pruned snapshots %s", deleted)

    # -- retention of segments -------------------------------------------------------------------

    async def retire(self, projected_seq: int) -> list[tuple[retention.Segment, retention.Archived]]:
        """Apply the policy to the snapshots, then find the closed segments no kept snapshot and
        no reader needs (all their records before the oldest kept snapshot's and before
        ``projected_seq``, where the audit projection stands): archived copies made (``archive``)
        or described (``delete``); :meth:`remove` takes them out once their receipt is signed. On
        the snapshot thread, so never beside a snapshot being saved or pruned."""
        return await asyncio.wrap_future(self._pool.submit(self._retire, projected_seq))

    async def remove(self, segments: list[retention.Segment]) -> None:
        def remove_all() -> None:
            for segment in segments:
                retention.remove(segment)

        await asyncio.wrap_future(self._pool.submit(remove_all))

    def _retire(self, projected_seq: int) -> list[tuple[retention.Segment, retention.Archived]]:
        self._prune()
        policy = self.policy
        kept = self.store.kept()
        if policy.segments == "keep" or not kept:
            return []
        oldest = min(m.journal_seq for m in kept)
        done: list[tuple[retention.Segment, retention.Archived]] = []
        for segment in retention.retirable(self.writer_directory, min(oldest, projected_seq)):
            if policy.segments == "archive":
                try:
                    done.append((segment, self.archive.add_segment(segment)))
                except retention.ArchiveRefused as exc:
                    log.error("journal: segment not archived, left in place: %s", exc)
                    break
            else:
                done.append((segment, retention.describe(segment)))
        return done

    def usage(self) -> dict[str, Any]:
        """Disk use, archive state and the oldest replayable tick (for ``GET /v1/journal/status``)."""
        kept = self.store.kept()
        current = [m for m in kept if m.epoch == self.epoch]
        segs = retention.segments(self.writer_directory)
        return {
            "policy": asdict(self.policy),
            "records_bytes": retention.directory_bytes(self.writer_directory),
            "snapshots_bytes": retention.directory_bytes(self.store.directory),
            "segments": len(segs),
            "first_seq": segs[0][0] if segs else None,
            "snapshots": len(kept),
            "oldest_replayable_tick": min((m.tick for m in current), default=None),
            "archive": self.archive.usage(),
            "disk": retention.disk(self.settings.journal_dir),
        }

    def wait_for_snapshot(self) -> None:
        saving, self._saving = self._saving, None
        if saving is not None:
            saving.result()  # a snapshot that failed to save raises here: fatal, like a failed append

    async def wait_for_snapshot_async(self) -> None:
        if self._saving is not None:
            await asyncio.wrap_future(self._saving)
            self.wait_for_snapshot()

    # -- rollback ------------------------------------------------------------------------------

    def rollback_target(
        self, snapshot: str | None = None, tick: int | None = None, mutation_id: str | None = None
    ) -> SnapshotMeta:
        """The kept snapshot a rollback goes back to: by name, the latest at or before ``tick`` in
        the current epoch's history, or the rollback point pinned for a mutation. ReplayError says
        why there is none."""
        if mutation_id is not None:
            snapshot = self.pins.get(mutation_id)
            if snapshot is None:
                raise ReplayError(f"no rollback point is pinned for mutation {mutation_id}")
        if snapshot is not None:
            found = self.store.kept_named(snapshot)
            if found is None:
                raise ReplayError(f"snapshot {snapshot!r} is not kept (GET /v1/world/snapshots lists them)")
            return found
        head = self.writer.head
        assert head is not None and tick is not None
        reader = JournalReader(self.writer_directory)
        try:
            return base_snapshot(self.store, reader, tick, head)
        except ReplayError:
            raise ReplayError(f"no kept snapshot at or before tick {tick}") from None

    def rollback(self, world: World, target: SnapshotMeta, reason: str, request: dict[str, Any]) -> World:
        """The world back at ``target`` as a new epoch: the snapshot is checked against the journal
        and its own hash, a ``rollback`` record (from, to, snapshot, reason, the state hash after,
        which is the snapshot's) is appended — the journal only grows; the abandoned epoch's
        records stay — and a snapshot of the new epoch is taken at once."""
        reader = JournalReader(self.writer_directory)
        replay = Replay.from_snapshot(self.store, target, header_at(reader, target.journal_seq))
        restored = replay.world
        head = self.writer.head
        body = {
            "from_tick": world.tick,
            "from_epoch": self.epoch,
            "to_tick": restored.tick,
            "snapshot": target.name,
            "snapshot_epoch": target.epoch,
            "reason": reason,
            "request": request,
        }
        digest = replay.last if replay.last is not None else replay.digest()
        started = time.perf_counter()
        header = self.writer.append(KIND_ROLLBACK, self.epoch + 1, restored.tick, body, digest.state_hash)
        self.records += 1
        self.append_s += time.perf_counter() - started
        assert head is not None and header.seq == head.seq + 1
        self.constants, self.text_codes = replay.constants, replay.text_codes
        self.versions = dict(target.traits)
        self.save_snapshot(restored, self.versions)
        return restored

    # -- rollback points -------------------------------------------------------------------

    def pin(self, mutation_id: str) -> None:
        """Keep the latest snapshot as the rollback point of a mutation just activated."""
        self.wait_for_snapshot()  # one being written is the latest (trait changes are rare: no cost to speak of)
        if self.last_snapshot is not None and mutation_id not in self.pins:
            self.pins[mutation_id] = self.last_snapshot.name
            self._write_pins()

    def unpin(self, open_mutations: set[str]) -> None:
        """Let go of the rollback points of mutations no longer open."""
        gone = [m for m in self.pins if m not in open_mutations]
        for m in gone:
            del self.pins[m]
        if gone:
            self._write_pins()

    def _read_pins(self) -> dict[str, str]:
        try:
            data = canonical.decode(self._pins_path.read_bytes())
        except FileNotFoundError:
            return {}
        except canonical.NonCanonical as exc:
            log.warning("journal: unreadable %s (%s): no snapshot is pinned", self._pins_path, exc)
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _write_pins(self) -> None:
        tmp = self._pins_path.with_suffix(".tmp")
        tmp.write_bytes(canonical.encode(dict(sorted(self.pins.items()))))
        tmp.replace(self._pins_path)

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        try:
            self.wait_for_snapshot()
        finally:
            self._pool.shutdown(wait=True)
            self.writer.close()

    def stats(self) -> dict[str, Any]:
        head = self.writer.head
        return {
            "head_seq": head.seq if head is not None else -1,
            "epoch": self.epoch,
            "records": self.records,
            "append_ms_mean": round(self.append_s / self.records * 1000, 4) if self.records else 0.0,
            "snapshots": self.snapshots_saved,
            "last_snapshot": self.last_snapshot.name if self.last_snapshot is not None else None,
        }


__all__ = ["KIND_CREATED", "KIND_STARTED", "KIND_TICK", "JournalMismatch", "WorldJournal"]
