"""The audit projection of the world's journal in Postgres, and the queries that read it.

``project`` reads the journal's records after the last one projected (``audit_projection``), turns
each into its audit events (``journal.audit.events_of``) and writes them (``audit_events``) in the
same transaction as the new position, so a crash never leaves the projection half a batch ahead.
``follow`` runs it about once a second in the worker process (which holds the receipt keys and
reads the journal beside the engine, so the world's process does none of it); ``python -m
audit.projection --rebuild`` throws the projection away and builds it again from the journal — it is
derived data, the journal is the record.

An event concerning a mutation but naming no agent (a trait that left, a rollback the pipeline
asked for) gets the agent from the event that brought that mutation's version live.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import and_, delete, or_, select
from sqlalchemy.ext.asyncio import async_sessionmaker

from audit import receipts
from genesis import signing
from genesis.db.models import AuditEventRow, AuditProjection
from journal.audit import AuditEvent, events_of
from journal.reader import JournalTail, archived_records
from journal.record import ZERO_HASH

BATCH = 2000  # records per transaction
FOLLOW_EVERY_S = 1.0
BACKLOG_S = 5.0  # a backlog is projected batch after batch for this long, then the next round
log = logging.getLogger("genesis.audit")


@dataclass(frozen=True)
class AuditFilter:
    kinds: tuple[str, ...] = ()
    from_seq: int | None = None
    to_seq: int | None = None
    from_tick: int | None = None
    to_tick: int | None = None
    epoch: int | None = None
    agent_id: str | None = None
    mutation_id: str | None = None
    trait_name: str | None = None
    cause: str | None = None

    def to_data(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items() if v not in (None, ())}


RECEIPTED = {
    "trait.arrived": "trait_set.changed",
    "trait.left": "trait_set.changed",
    "world.rollback": "world.rollback",
}


async def project(
    sessions: async_sessionmaker,
    journal_dir: Path,
    max_records: int = BATCH,
    keyring: signing.Keyring | None = None,
    tail: JournalTail | None = None,
) -> int:
    """Project up to ``max_records`` new journal records; how many were read. With ``keyring``,
    each trait-set change and world rollback also gets its signed receipt, bound to the journal
    record (its sequence number and header hash), in the same transaction. ``tail``: the reader
    to go on with from one call to the next (else each call finds its place from the start of
    the segment)."""
    tail = tail if tail is not None else JournalTail(journal_dir / "records")
    async with sessions() as session, session.begin():
        state = await session.get(AuditProjection, 1, with_for_update=True)
        if state is None:
            state = AuditProjection(id=1, journal_dir=str(journal_dir), projected_seq=-1, chain_head=ZERO_HASH)
            session.add(state)
        params = dict(state.params) if state.params else None
        read = 0
        events: list[AuditEvent] = []
        last = None
        anchors: dict[int, str] = {}  # seq -> header hash, of the records that get receipts
        tail.seek(state.projected_seq + 1)
        # read and checked in a thread: the engine's event loop runs this beside the world's ticks
        for record in await asyncio.to_thread(tail.read, max_records):
            if last is None and record.header.parent_hash != state.chain_head:
                raise RuntimeError(
                    f"the journal in {journal_dir} does not continue the projected one at record "
                    f"{record.header.seq}: rebuild the projection (python -m audit.projection --rebuild)"
                )
            produced = events_of(record, params)
            if any(e.kind in RECEIPTED for e in produced):
                anchors[record.header.seq] = record.header.hash().hex()
            events += produced
            if isinstance(record.inputs.get("params"), dict):
                params = record.inputs["params"]
            last = record.header
            read += 1
        if last is None:
            return 0
        await _fill_agents(session, events)
        if keyring is not None:
            for e in events:
                if e.kind in RECEIPTED:
                    await _receipt(session, keyring, e, anchors[e.seq])
        for e in events:
            session.add(
                AuditEventRow(
                    seq=e.seq,
                    idx=e.index,
                    epoch=e.epoch,
                    tick=e.tick,
                    kind=e.kind,
                    agent_id=e.agent_id,
                    mutation_id=e.mutation_id,
                    trait_name=e.trait_name,
                    cause=e.cause,
                    summary=e.summary,
                )
            )
        state.projected_seq = last.seq
        state.chain_head = last.hash()
        state.params = params
        state.journal_dir = str(journal_dir)
    return read


async def _receipt(session, keyring: signing.Keyring, e: AuditEvent, header_hash: str) -> None:
    subject = {
        "agent_id": e.agent_id,
        "mutation_id": e.mutation_id,
        "trait_name": e.trait_name,
        "epoch": e.epoch,
        "tick": e.tick,
        "journal_seq": e.seq,
        "journal_header": header_hash,
    }
    body = {"event": e.kind, "cause": e.cause, "summary": e.summary}
    await receipts.issue(session, keyring, RECEIPTED[e.kind], f"journal:{e.seq}:{e.index}", subject, body)


async def _fill_agents(session, events: list[AuditEvent]) -> None:
    """The agent of events that name only a mutation, from the event that brought it live."""
    known = {e.mutation_id: e.agent_id for e in events if e.kind == "trait.arrived" and e.agent_id and e.mutation_id}
    missing = {e.mutation_id for e in events if e.agent_id is None and e.mutation_id and e.mutation_id not in known}
    if missing:
        rows = await session.execute(
            select(AuditEventRow.mutation_id, AuditEventRow.agent_id).where(
                AuditEventRow.kind == "trait.arrived", AuditEventRow.mutation_id.in_(missing)
            )
        )
        known.update({m: a for m, a in rows if a})
    for i, e in enumerate(events):
        if e.agent_id is None and e.mutation_id in known:
            events[i] = AuditEvent(**{**e.__dict__, "agent_id": known[e.mutation_id]})


async def follow(
    sessions: async_sessionmaker, journal_dir: Path, keyring: signing.Keyring, stop: asyncio.Event
) -> None:
    """Keep the projection up with the journal until ``stop``: about once a second, a backlog
    (after a stop, or a fast-forwarded world) for a few seconds a round. Each round is one
    transaction holding the projection's row, so projectors of several workers take turns and
    none projects a record twice. A failure (Postgres away, no journal yet) is logged when it
    first appears and retried."""
    tail = JournalTail(journal_dir / "records")  # the projection's place, kept between rounds
    failing: str | None = None
    while not stop.is_set():
        try:
            until = time.monotonic() + BACKLOG_S
            while (
                not stop.is_set()
                and await project(sessions, journal_dir, keyring=keyring, tail=tail)
                and time.monotonic() < until
            ):
                pass
            if failing is not None:
                log.info("audit projection: going on at record %d", tail.next_seq)
            failing = None
        except Exception as exc:
            if str(exc) != failing:
                log.warning("audit projection: %s (retried every %.0f s)", exc, FOLLOW_EVERY_S)
            failing = str(exc)
        try:
            await asyncio.wait_for(stop.wait(), FOLLOW_EVERY_S)
        except TimeoutError:
            pass


async def rebuild(sessions: async_sessionmaker, journal_dir: Path, archive_dir: Path | None = None) -> int:
    """The projection thrown away and built again from the journal's first record: from the
    archive (``archive_dir``) for the segments retention retired, then the journal's own."""
    async with sessions() as session, session.begin():
        await session.execute(delete(AuditEventRow))
        await session.execute(delete(AuditProjection))
    total = 0
    tail = JournalTail(journal_dir / "records", archive=archived_records(archive_dir))
    while True:
        read = await project(sessions, journal_dir, tail=tail)
        if not read:
            return total
        total += read


async def query(
    sessions: async_sessionmaker, f: AuditFilter, after: tuple[int, int] | None, limit: int
) -> list[dict[str, Any]]:
    """Events matching ``f`` in journal order, after the (seq, index) ``after``."""
    conditions: list[Any] = []
    column = AuditEventRow
    if f.kinds:
        conditions.append(column.kind.in_(f.kinds))
    for value, col, op in (
        (f.from_seq, column.seq, "ge"),
        (f.to_seq, column.seq, "le"),
        (f.from_tick, column.tick, "ge"),
        (f.to_tick, column.tick, "le"),
    ):
        if value is not None:
            conditions.append(col >= value if op == "ge" else col <= value)
    if f.epoch is not None:
        conditions.append(column.epoch == f.epoch)
    for text_value, text_column in (
        (f.agent_id, column.agent_id),
        (f.mutation_id, column.mutation_id),
        (f.trait_name, column.trait_name),
        (f.cause, column.cause),
    ):
        if text_value is not None:
            conditions.append(text_column == text_value)
    if after is not None:
        conditions.append(or_(column.seq > after[0], and_(column.seq == after[0], column.idx > after[1])))
    statement = select(column).where(*conditions).order_by(column.seq, column.idx).limit(limit)
    async with sessions() as session:
        rows = (await session.scalars(statement)).all()
    return [
        {
            "seq": r.seq,
            "index": r.idx,
            "epoch": r.epoch,
            "tick": r.tick,
            "kind": r.kind,
            "agent_id": r.agent_id,
            "mutation_id": r.mutation_id,
            "trait_name": r.trait_name,
            "cause": r.cause,
            "summary": r.summary,
        }
        for r in rows
    ]


async def position(sessions: async_sessionmaker) -> tuple[int, bytes]:
    """(last projected seq, its header hash): -1 and the zero hash before anything is projected."""
    async with sessions() as session:
        state = await session.get(AuditProjection, 1)
    return (state.projected_seq, state.chain_head) if state is not None else (-1, ZERO_HASH)


def main() -> None:
    from genesis.config import get_settings
    from genesis.db.session import get_sessionmaker

    parser = argparse.ArgumentParser(prog="python -m audit.projection", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rebuild", action="store_true", help="throw the projection away and build it again")
    args = parser.parse_args()
    settings = get_settings()
    sessions = get_sessionmaker(settings.database_url)

    async def run() -> int:
        if args.rebuild:
            return await rebuild(sessions, settings.journal_dir, settings.journal_archive_dir)
        total = 0
        tail = JournalTail(settings.journal_dir / "records")
        while read := await project(sessions, settings.journal_dir, tail=tail):
            total += read
        return total

    print(f"{asyncio.run(run())} journal record(s) projected from {settings.journal_dir}")


if __name__ == "__main__":
    main()
