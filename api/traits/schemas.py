"""Answers of the trait routes (api/traits/routes.py): the live traits with their
ledger and the traits selection took out, one trait's versions, and its family tree."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from api.mutations.schemas import QuarantineInfo, TraitVersionRef
from api.paging import NextCursor


class LedgerEffect(BaseModel):
    mean: float = Field(description="Mean relative effect: carriers' fitness against comparable non-carriers'")
    low: float = Field(description="Lower end of its 95 % interval")
    high: float = Field(description="Upper end of its 95 % interval")


class TraitLedgerInfo(BaseModel):
    """A live trait in the engine's fitness ledger (measured at each WorldSnapshot since it went live)."""

    carriers: int = Field(description="Molbots carrying it at the ledger's latest snapshot")
    uncarried_ticks: int = Field(
        description="Ticks since a Molbot last carried it (it goes extinct at the manifest's extinction_ticks)"
    )
    snapshots: int = Field(description="Snapshots with enough carriers behind its effect (the newest ones)")
    effect: LedgerEffect | None = Field(description="null: fewer than two snapshots with enough carriers")
    tick: int = Field(description="The ledger's latest snapshot")


class TraitSummary(BaseModel):
    """One live trait of ``GET /api/traits``."""

    trait_name: str
    version: int = Field(description="The live version")
    mutation_id: str
    agent_id: str | None
    class_name: str
    code_hash: str
    activated_at: float | None = Field(description="When this version was activated (unix seconds)")
    carriers: int | None = Field(
        default=None, description="Molbots carrying it at the latest WorldSnapshot (null: no snapshot)"
    )
    running: bool | None = Field(
        default=None,
        description="Whether the engine's trait host ran it at the engine's last report (false for a second or "
        "two after activation, while it is loaded; null: the engine is not running)",
    )
    mutation_status: str | None = Field(
        default=None, description="The status of the mutation that made this version: activated (observed now) or kept"
    )
    fitness_verdict: str | None = Field(
        default=None,
        description="positive | neutral | inconclusive (too few carriers to judge it); null: still observed, "
        "or kept without a verdict",
    )
    verdict_reason: str | None = Field(default=None, description="Why its fitness verdict is what it is")
    ledger: TraitLedgerInfo | None = Field(
        default=None, description="Its evidence since the verdict (null: the engine has not measured it yet)"
    )


class QuarantinedTrait(BaseModel):
    """A trait whose newest version the engine quarantined: that version is not live (its
    mutation is rolled back within seconds, ``mutation_status`` says whether it was yet)."""

    trait_name: str
    version: int = Field(description="The quarantined version")
    mutation_id: str
    agent_id: str | None
    mutation_status: str | None = Field(description="activated or kept: its rollback follows; rolled_back: done")
    quarantine: QuarantineInfo
    live_version: int | None = Field(
        description="The version of this trait live now (the previous one, restored by the rollback); null: none"
    )


class DepartedTrait(BaseModel):
    """A kept trait selection took out after its verdict: extinct, or rolled back by a late verdict."""

    trait_name: str
    version: int
    mutation_id: str
    agent_id: str | None
    how: Literal["extinct", "late_verdict"]
    reason: str | None = Field(description="In plain words, as recorded")
    at: float = Field(description="When (unix seconds)")
    live_version: int | None = Field(description="The version of the trait live now, if any")


class TraitsResponse(BaseModel):
    traits: list[TraitSummary] = Field(
        description="The live traits: the same set GET /api/stats counts as live_traits, by name"
    )
    quarantined: list[QuarantinedTrait] = Field(
        default_factory=list,
        description="Traits whose newest version the engine quarantined (not live), newest quarantine first, "
        "at most 100, on the first page only; a newer version of a trait removes it from here",
    )
    departed: list[DepartedTrait] = Field(
        default_factory=list,
        description="Kept traits selection took out since (extinct, or rolled back by a late verdict of the live "
        "ledger), newest first, at most 20, on the first page only",
    )
    snapshot_tick: int | None = Field(default=None, description="The WorldSnapshot the carriers come from")
    max_live_traits: int | None = Field(
        default=None, description="The manifest's bound on the live set (selection.max_live_traits)"
    )
    next_cursor: NextCursor = None


class TraitVersionInfo(BaseModel):
    version: int
    status: str = Field(
        description="active (live) | quarantined (the engine stopped running it; its rollback "
        "follows) | superseded (a newer version replaced it) | rolled_back | extinct (selection took it out "
        "of the live set: no carrier for the manifest's extinction_ticks, or crowded out; its owner may revive it)"
    )
    mutation_id: str
    agent_id: str | None
    class_name: str
    code_hash: str
    activated_at: float | None
    mutation_status: str | None = Field(description="The status of the mutation that made this version")
    replaced_version: int | None = Field(description="The version this one replaced when it was activated")
    rollback_reason: str | None = Field(
        description="Why it was rolled back: its verdict, a late verdict of the live ledger, a quarantine, a request"
    )
    extinct_reason: str | None = Field(default=None, description="Why it went extinct (status extinct)")
    quarantine: QuarantineInfo | None = Field(default=None, description="Set if the engine quarantined this version")


class LiveTraitVersion(TraitVersionInfo):
    code: str = Field(description="The source code of the live version")
    file_path: str


class PendingModification(BaseModel):
    mutation_id: str
    agent_id: str
    status: str
    replaces: TraitVersionRef | None = Field(description="null: proposed as a new trait")
    created_at: float


class TraitDetailResponse(BaseModel):
    trait_name: str
    live_version: int | None = Field(description="null: no version is live (all rolled back, or quarantined)")
    live: LiveTraitVersion | None
    versions: list[TraitVersionInfo] = Field(description="The activated versions, newest first, a page at a time")
    pending: list[PendingModification] = Field(
        description="Proposals of this trait still in flight (queued, validating, sandbox_ok), oldest first"
    )
    carriers: int | None = None
    snapshot_tick: int | None = None
    next_cursor: NextCursor = Field(default=None, description="The next page of versions (?cursor=); null: the last")


class LineageNode(BaseModel):
    """One trait version of a family tree."""

    mutation_id: str = Field(description="The mutation that made this version (the node's id in ``edges``)")
    trait_name: str
    version: int
    generation: int = Field(description="0: a version of the trait asked for; n: n generations above them")
    agent_id: str | None = Field(description="Who proposed it (genesis-coder: an evolution cycle)")
    status: str = Field(description="active | quarantined | superseded | rolled_back")
    mutation_status: str | None = Field(description="The status of the mutation that made this version")
    fitness_verdict: str | None = Field(
        description="positive | neutral | negative | inconclusive (too few carriers to judge); null: not observed (yet)"
    )
    origin: str | None = Field(description="builtin, the LLM provider's name, or agent; null: recorded before lineage")
    operators: list[str] = Field(description="The built-in operator's steps in order: seed, perturb, insert, recombine")
    seed: int | None = Field(description="The built-in operator's random seed (it gives the same code again)")
    seed_trait: str | None = Field(description="The library's seed trait it started from, if any")
    created_at: float = Field(description="When this version went live (unix seconds)")


class LineageEdge(BaseModel):
    parent: str = Field(description="The parent version's mutation_id")
    child: str = Field(description="The child version's mutation_id")


class TraitLineageResponse(BaseModel):
    trait_name: str
    nodes: list[LineageNode] = Field(
        description="The trait's versions (generation 0, newest first), then their ancestors by generation"
    )
    edges: list[LineageEdge] = Field(description="parent → child, between nodes of this answer")
    depth: int = Field(description="Generations of ancestors found above the trait's versions")
    truncated: bool = Field(description="True: the depth or the number of versions bounded the tree")
