"""Request and response bodies of the world's endpoints: its history, and its journal's snapshots,
rollbacks and status."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from genesis.ids import MUTATION_ID_PATTERN

SNAPSHOT_NAME_PATTERN = re.compile(r"^snap-[A-Za-z0-9._-]{1,120}$")
ROLLBACK_ID_PATTERN = re.compile(r"^rbk_[0-9a-f]{16}$")


class SnapshotInfo(BaseModel):
    name: str
    epoch: int = Field(description="The journal's epoch the snapshot belongs to (each rollback starts a new one)")
    tick: int
    journal_seq: int = Field(description="Sequence number of the last journal record the snapshot's world had applied")
    state_hash: str
    chain_head: str = Field(description="The header hash of that record")
    world_version: str
    traits: dict[str, str] = Field(description="Live trait -> the mutation id whose version ran")
    created_at: float
    size: int
    pinned_for: list[str] = Field(description="Mutations whose rollback point this snapshot is (kept while they are)")


class SnapshotListResponse(BaseModel):
    snapshots: list[SnapshotInfo]


class WorldRollbackRequest(BaseModel):
    """Exactly one of ``snapshot`` (a kept snapshot's name), ``tick`` (the latest kept snapshot at
    or before it, in the current epoch's history) or ``mutation_id`` (the snapshot the engine kept
    when that mutation's trait went live: its rollback point, kept while it is live and for a day
    after a rollback)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"tick": 36000, "reason": "a trait starved half the world"}]},
    )

    snapshot: str | None = Field(default=None, pattern=SNAPSHOT_NAME_PATTERN.pattern, max_length=125)
    tick: int | None = Field(default=None, ge=0)
    mutation_id: str | None = Field(default=None, pattern=MUTATION_ID_PATTERN.pattern)
    reason: str = Field(min_length=1, max_length=500, description="Why; recorded in the journal")

    @model_validator(mode="after")
    def _one_target(self) -> WorldRollbackRequest:
        if sum(target is not None for target in (self.snapshot, self.tick, self.mutation_id)) != 1:
            raise ValueError("give exactly one of snapshot, tick or mutation_id")
        return self

    def target(self) -> dict[str, str | int]:
        if self.snapshot is not None:
            return {"snapshot": self.snapshot}
        if self.tick is not None:
            return {"tick": self.tick}
        assert self.mutation_id is not None
        return {"mutation_id": self.mutation_id}


class WorldRollbackAccepted(BaseModel):
    request_id: str
    status: Literal["requested"] = "requested"
    status_url: str


class WorldRollbackStatus(BaseModel):
    request_id: str
    status: Literal["requested", "applied", "refused"]
    reason: str | None = Field(default=None, description="Why it was asked for, or (refused) why it was refused")
    snapshot: str | None = None
    epoch: int | None = Field(default=None, description="applied: the new epoch")
    from_tick: int | None = None
    from_epoch: int | None = None
    to_tick: int | None = None
    journal_seq: int | None = Field(default=None, description="applied: the sequence number of the rollback record")
    state_hash: str | None = None
    requested_at: float | None = None
    updated_at: float | None = None


class RetentionPolicy(BaseModel):
    keep_last: int
    keep_every: int
    keep_ticks: int = Field(description="How long (ticks behind the newest) the keep_every snapshots stay; 0: for ever")
    segments: Literal["keep", "archive", "delete"]


class ArchiveState(BaseModel):
    segments: int = Field(description="Segments in the archive")
    bytes: int = Field(description="Its size on disk (segments, snapshots and index)")
    first_seq: int | None
    last_seq: int | None
    first_tick: int | None = Field(description="The first tick an archived segment holds")
    snapshots: int = Field(description="Snapshots the archive keeps (replay starts from them)")


class DiskState(BaseModel):
    total_bytes: int
    free_bytes: int
    low: bool = Field(description="Free space below GENESIS_JOURNAL_DISK_WARN_FREE: the engine warns in its log")


class JournalStatus(BaseModel):
    """What the journal holds and keeps, as the engine last published it (every 10 s)."""

    policy: RetentionPolicy = Field(description="The manifest's retention, as the engine applies it")
    records_bytes: int = Field(description="The journal's segments on disk")
    snapshots_bytes: int
    segments: int
    first_seq: int | None = Field(description="The first record the journal itself still holds")
    snapshots: int
    oldest_replayable_tick: int | None = Field(
        description="The oldest kept snapshot of the current epoch: replay from the journal alone starts there"
    )
    archive: ArchiveState
    disk: DiskState
    updated_at: float


class HistoryPoint(BaseModel):
    """One WorldSnapshot of ``GET /api/world/history``."""

    tick: int
    timestamp: float = Field(description="The engine's wall clock at the snapshot (unix seconds)")
    entity_count: int
    avg_energy: float
    trait_usage: dict[str, int] = Field(
        description="Molbots carrying each trait (a Molbot counts for each of its traits)"
    )


class HistoryResponse(BaseModel):
    run_id: str = Field(description="The engine run the points belong to (ticks start again at each run)")
    points: list[HistoryPoint] = Field(description="Oldest first")
    truncated: bool = Field(
        description="More snapshots lie in the range than `limit`: the oldest were left out "
        "(ask again with `to_tick` below the first point for them)"
    )
