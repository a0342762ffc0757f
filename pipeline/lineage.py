"""The lineage of trait versions: where a proposal's code came from (``mutations.lineage``,
written once when the proposal is recorded) and the family tree read from it.

A proposal's parents are the trait versions that were live when it was made: the version an
agent's proposal replaces, the version an LLM's modification was written from, the live traits
the built-in operator varied. The tree of a trait is its activated versions and, generation by
generation, their parents across traits, to a bounded depth and number of versions, each
version visited once (a cycle in the records cannot loop). A mutation recorded before lineage
existed falls back on the version its activation replaced."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from genesis.db.models import Mutation, TraitVersion
from genesis.dto import Lineage, ParentVersion
from pipeline.quarantines import quarantines_of

AGENT_ORIGIN = "agent"
MAX_DEPTH = 10  # generations of ancestors above the trait's own versions
MAX_VERSIONS = 500  # versions in one tree, the trait's own included

VersionKey = tuple[str, int]  # (trait_name, version)


def parent_version(trait_name: str, version: int, mutation_id: str) -> ParentVersion:
    return ParentVersion(trait_name=trait_name, version=version, mutation_id=mutation_id)


def agent_lineage(replaced: ParentVersion | None) -> dict[str, Any]:
    """The lineage column of an agent's proposal: the live version it replaces, if any."""
    return Lineage(origin=AGENT_ORIGIN, parents=[replaced] if replaced else []).model_dump()


def recorded_lineage(record: Mutation) -> Lineage | None:
    """The lineage of a mutation record (None: recorded before lineage existed)."""
    return Lineage.model_validate(record.lineage) if record.lineage is not None else None


def _parents(row: TraitVersion, mutation: Mutation | None) -> list[VersionKey]:
    if mutation is None:
        return []
    if mutation.lineage is not None:
        return [(p["trait_name"], int(p["version"])) for p in mutation.lineage.get("parents") or []]
    if mutation.replaced_version is not None:  # an older record: the version its activation replaced
        return [(row.trait_name, mutation.replaced_version)]
    return []


@dataclass(frozen=True)
class TreeVersion:
    """One version of the tree; ``generation`` 0: a version of the trait asked for, n: n
    generations above them."""

    row: TraitVersion
    mutation: Mutation | None
    generation: int
    quarantined: bool
    parents: list[VersionKey]

    @property
    def key(self) -> VersionKey:
        return (self.row.trait_name, self.row.version)

    @property
    def status(self) -> str:
        return "quarantined" if self.quarantined and self.row.status == "active" else self.row.status

    @property
    def lineage(self) -> Lineage | None:
        return recorded_lineage(self.mutation) if self.mutation is not None else None


@dataclass
class FamilyTree:
    versions: list[TreeVersion] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)  # (parent mutation_id, child mutation_id)
    depth: int = 0  # generations of ancestors found
    truncated: bool = False  # a bound left ancestors out


async def family_tree(
    session: AsyncSession, trait_name: str, depth: int = MAX_DEPTH, max_versions: int = MAX_VERSIONS
) -> FamilyTree:
    """The versions of ``trait_name`` (newest ``max_versions``) and their ancestors up to ``depth``
    generations above them; empty when the trait never had an activated version."""
    base = select(TraitVersion, Mutation).outerjoin(Mutation, Mutation.mutation_id == TraitVersion.mutation_id)
    tree = FamilyTree()
    found: dict[VersionKey, TreeVersion] = {}
    rows = (
        await session.execute(
            base.where(TraitVersion.trait_name == trait_name)
            .order_by(TraitVersion.version.desc())
            .limit(max_versions + 1)
        )
    ).all()
    if len(rows) > max_versions:
        rows, tree.truncated = rows[:max_versions], True
    generation = 0
    while rows:
        tree.depth = generation
        quarantines = await quarantines_of(session, [row.mutation_id for row, _ in rows])
        for row, mutation in rows:
            version = TreeVersion(row, mutation, generation, row.mutation_id in quarantines, _parents(row, mutation))
            found[version.key] = version
            tree.versions.append(version)
        wanted = sorted({key for v in tree.versions if v.generation == generation for key in v.parents} - set(found))
        if not wanted:
            break
        room = max_versions - len(found)
        if generation == depth or room <= 0:
            tree.truncated = True
            break
        if len(wanted) > room:
            wanted, tree.truncated = wanted[:room], True
        generation += 1
        rows = (
            await session.execute(base.where(tuple_(TraitVersion.trait_name, TraitVersion.version).in_(wanted)))
        ).all()
    for child in tree.versions:
        for key in dict.fromkeys(child.parents):  # each parent once, in the recorded order
            parent = found.get(key)
            if parent is not None and parent is not child:
                tree.edges.append((parent.row.mutation_id, child.row.mutation_id))
    return tree
