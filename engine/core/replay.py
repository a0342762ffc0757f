"""Replay: a world rebuilt from a snapshot and the journal records after it, through the apply path
the live engine uses (``engine.core.inputs``), with no trait host and no container.

:class:`Replay` advances a world one record at a time and checks each record's state hash; the
first record whose hash differs is reported with the fields, entities and values that differ
(``engine.core.divergence``). The engine uses it at start to come back to the journal's head, and
``verify`` (the CLI's ``genesis world replay`` and the API's verify endpoint, through a worker
activity) to check a range of ticks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from journal.reader import JournalReader
from journal.record import Header, JournalRecord
from journal.snapshots import SnapshotMeta, SnapshotStore, verify_against

from . import divergence
from .inputs import BadInputs, TickInputs, apply
from .state_digest import ConstantColumns, Digest, TextCodes
from .world import World

# Bump when a tick's rules change what the same inputs do to a world: a journal or a snapshot of
# another version is not replayed (its hashes could not match), it is refused with this reason.
WORLD_VERSION = "1"

KIND_TICK = "tick"
KIND_CREATED = "world.created"  # the first record: the world's seed, parameters and version
KIND_ROLLBACK = "rollback"  # the world went back to a snapshot: a new epoch starts
# Every other kind (engine.started, ...) notes an event and leaves the world as it was.


class ReplayError(Exception):
    """The journal and its snapshots cannot be replayed (not a divergence: a missing or
    mismatched piece); the message says which and where."""


@dataclass
class Divergence:
    seq: int
    tick: int
    epoch: int
    kind: str
    recorded_hash: str
    replayed_hash: str
    differences: list[divergence.Difference] = field(default_factory=list)

    def to_data(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "tick": self.tick,
            "epoch": self.epoch,
            "kind": self.kind,
            "recorded_state_hash": self.recorded_hash,
            "replayed_state_hash": self.replayed_hash,
            "differences": [d.to_data() for d in self.differences],
        }


def tick_inputs(record: JournalRecord) -> TickInputs:
    try:
        return TickInputs.from_data({k: v for k, v in record.inputs.items() if k != "probe"})
    except BadInputs as exc:
        raise ReplayError(f"record {record.header.seq}: {exc}") from None


class Replay:
    """A world being brought forward record by record."""

    def __init__(self, store: SnapshotStore, world: World, meta: SnapshotMeta | None = None) -> None:
        self.store = store
        self.world = world
        self.snapshot = meta
        self.constants = ConstantColumns()
        self.text_codes = TextCodes()
        self.last: Digest | None = None
        # the live trait versions as the records went (trait -> mutation id), from the snapshot's
        self.versions: dict[str, str] = dict(meta.traits) if meta is not None else {}

    @classmethod
    def from_snapshot(cls, store: SnapshotStore, meta: SnapshotMeta, header: Header | None) -> Replay:
        """A replay starting at a snapshot, checked against the journal header it names (None:
        the snapshot is older than anything left to check it against)."""
        world = load_world(store, meta)
        if header is not None:
            why = verify_against(meta, header)
            if why is not None:
                raise ReplayError(f"snapshot {meta.name} does not match the journal: {why}")
        replay = cls(store, world, meta)
        d = replay.digest()
        if d.state_hash != meta.state_hash:
            raise ReplayError(
                f"snapshot {meta.name}: its world hashes to {d.hex}, the snapshot says {meta.state_hash.hex()}"
            )
        return replay

    def digest(self) -> Digest:
        self.last = self.world.state_digest(self.constants, self.text_codes)
        return self.last

    def apply(self, record: JournalRecord) -> Digest:
        """Apply one record (ticks through the live apply path; a rollback restores its snapshot);
        the state's digest after it."""
        kind = record.header.kind
        if kind == KIND_TICK:
            inputs = tick_inputs(record)
            if inputs.tick != self.world.tick:
                raise ReplayError(
                    f"record {record.header.seq} holds tick {inputs.tick}, the world is at tick {self.world.tick}"
                )
            apply(self.world, inputs)
            if inputs.traits is not None:
                self.versions = dict(inputs.traits.versions)
        elif kind == KIND_ROLLBACK:
            name = record.inputs.get("snapshot")
            metas = {m.name: m for m in self.store.kept()}
            if name not in metas:
                raise ReplayError(f"record {record.header.seq}: rollback to snapshot {name!r}, which is not kept")
            self.world = load_world(self.store, metas[name])
            self.versions = dict(metas[name].traits)
            self.constants = ConstantColumns()  # ids of the abandoned epoch may come back as other entities
            self.text_codes = TextCodes()
        return self.digest()

    def check(self, record: JournalRecord) -> Divergence | None:
        """Apply ``record`` and compare the state with what the live run recorded."""
        d = self.apply(record)
        h = record.header
        if d.state_hash == h.state_hash:
            return None
        found = Divergence(h.seq, h.tick, h.epoch, h.kind, h.state_hash.hex(), d.hex)
        probe = record.inputs.get("probe")
        if isinstance(probe, dict):
            found.differences = divergence.differences(probe, d.probe, self.world.state_columns())
        return found


def load_world(store: SnapshotStore, meta: SnapshotMeta) -> World:
    if meta.world_version != WORLD_VERSION:
        raise ReplayError(
            f"snapshot {meta.name} is of world version {meta.world_version}; "
            f"this engine replays version {WORLD_VERSION}"
        )
    _, data = store.load(meta.name)
    return World.from_snapshot(data)


def base_snapshot(store: SnapshotStore, reader: JournalReader, at_tick: int | None, head: Header) -> SnapshotMeta:
    """The snapshot to start from: the latest one at or before ``at_tick`` (None: the latest) of
    the head's epoch or, when that epoch has none yet, the one its rollback went back to."""
    metas = [m for m in store.kept() if m.journal_seq <= head.seq]
    mine = [m for m in metas if m.epoch == head.epoch and (at_tick is None or m.tick <= at_tick)]
    if mine:
        return max(mine, key=lambda m: (m.journal_seq, m.number))
    older = [m for m in metas if m.epoch < head.epoch and (at_tick is None or m.tick <= at_tick)]
    if older:
        return max(older, key=lambda m: (m.epoch, m.journal_seq, m.number))
    raise ReplayError(
        "no kept snapshot to start from" + (f" at or before tick {at_tick}" if at_tick is not None else "")
    )


def records_after(reader: JournalReader, meta: SnapshotMeta, to_seq: int | None = None) -> Iterator[JournalRecord]:
    return reader.records(from_seq=meta.journal_seq + 1, to_seq=to_seq)


def header_at(reader: JournalReader, seq: int) -> Header | None:
    if seq < 0:
        return None
    for record in reader.records(from_seq=seq, to_seq=seq):
        return record.header
    return None
