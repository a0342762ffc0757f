"""Rounds of agents' actions in Postgres: the engine opens, closes and settles them
(engine/process/rounds.py); the API admits submissions into the round that is accepting.

Accepting and closing exclude each other through the round's row: a submission is inserted only
while its round is ``accepting``, under a share lock of that row held until its transaction
commits, and closing the round updates the row, so it waits for every submission being inserted
and no submission can be accepted after it. Every submission the API answered "accepted" is
therefore in the set the engine reads after closing, exactly once. An agent makes at most
``GENESIS_ROUNDS_MAX_SUBMISSIONS_PER_AGENT`` submissions to a round.

Idempotency keys are scoped to their agent: the same (agent, key) with the same body is answered
as the first time, with another body it is a conflict; another agent's key of the same text is
another submission.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select, text, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from genesis import canonical
from genesis.db.models import Agent, RoundSubmission, WorldRound

ACCEPTING, EXECUTING, SETTLED = "accepting", "executing", "settled"
ACCEPTED, APPLIED, REJECTED = "accepted", "applied", "rejected"
NOT_ACCEPTING = "Round not accepting submissions"


def body_hash(code: str) -> str:
    """What an idempotency key binds: the submission's body."""
    return hashlib.sha256(canonical.encode({"code": code})).hexdigest()


def new_submission_id() -> str:
    return f"sub_{secrets.token_hex(8)}"


# -- the engine's side -----------------------------------------------------------------------


async def open_round(
    conn: AsyncConnection, epoch: int, opens_tick: int, closes_tick: int, deadline_at: datetime
) -> int:
    """A new accepting round (the next id); its id."""
    round_id = int(await conn.scalar(select(func.coalesce(func.max(WorldRound.round_id), 0))) or 0) + 1
    await conn.execute(
        insert(WorldRound),
        {
            "round_id": round_id,
            "state": ACCEPTING,
            "epoch": epoch,
            "opens_tick": opens_tick,
            "closes_tick": closes_tick,
            "deadline_at": deadline_at,
        },
    )
    return round_id


async def close_round(conn: AsyncConnection, round_id: int) -> None:
    """No more submissions: waits for those being inserted (see the module doc)."""
    await conn.execute(
        update(WorldRound)
        .where(WorldRound.round_id == round_id, WorldRound.state == ACCEPTING)
        .values(state=EXECUTING, closed_at=datetime.now(UTC))
    )


async def unsettled(conn: AsyncConnection) -> list[Row]:
    """Rounds an engine left open or executing (it stopped before settling them)."""
    statement = select(WorldRound.round_id, WorldRound.state).where(WorldRound.state != SETTLED)
    return list((await conn.execute(statement.order_by(WorldRound.round_id))).all())


async def accepted(conn: AsyncConnection, round_id: int) -> list[Row]:
    """The round's submissions in the order they are applied: agent id, then submission order."""
    s = RoundSubmission
    statement = (
        select(s.id, s.agent_id, s.member_id, s.code, s.body_hash, s.seq)
        .where(s.round_id == round_id, s.status == ACCEPTED)
        .order_by(s.agent_id, s.seq)
    )
    return list((await conn.execute(statement)).all())


MAX_INBOX = 16  # messages one member is handed in a round: the newest
MAILBOX_ROUNDS = 100  # messages older than this many rounds are not kept for a member that never acts


async def inbox(conn: AsyncConnection, round_id: int) -> dict[int, list[dict[str, Any]]]:
    """The messages each member is handed in round ``round_id``: those applied to it since the
    round of its previous submission (that round's own included: its state was read before they
    were sent), within MAILBOX_ROUNDS, the newest MAX_INBOX, oldest first. From the rounds'
    records, so an engine restart loses none, and a member that does not act keeps its mail."""
    s = RoundSubmission
    oldest = round_id - MAILBOX_ROUNDS
    sent = await conn.execute(
        select(s.round_id, s.member_id, s.outcomes)
        .join(WorldRound, WorldRound.round_id == s.round_id)
        .where(s.round_id >= oldest, s.round_id < round_id, s.status == APPLIED, WorldRound.state == SETTLED)
        .order_by(s.round_id, s.agent_id, s.seq)
    )
    last_read = dict(
        (
            await conn.execute(
                select(s.member_id, func.max(s.round_id))
                .where(s.round_id >= oldest, s.round_id < round_id, s.status != ACCEPTED)
                .group_by(s.member_id)
            )
        ).all()
    )
    mail: dict[int, list[dict[str, Any]]] = {}
    for sent_in, sender, outcomes in sent.all():
        for outcome in outcomes or []:
            action = outcome.get("action") if isinstance(outcome, dict) and outcome.get("applied") else None
            if not isinstance(action, list) or len(action) != 3 or action[0] != "message":
                continue
            to, text = action[1], action[2]
            if type(to) is int and sent_in >= last_read.get(to, oldest):
                mail.setdefault(to, []).append({"from_member_id": sender, "text": text, "round_id": sent_in})
    return {member: box[-MAX_INBOX:] for member, box in mail.items()}


async def members(conn: AsyncConnection) -> dict[int, str]:
    """Member id -> the agent that controls it."""
    rows = await conn.execute(select(Agent.member_id, Agent.agent_id).where(Agent.member_id.is_not(None)))
    return {int(m): a for m, a in rows.all() if m is not None}


async def settle_round(
    conn: AsyncConnection,
    round_id: int,
    settled_tick: int | None,
    results: dict[str, dict[str, Any]],
    summary: dict[str, Any],
    receipt_id: str | None,
) -> None:
    """Record each submission's fate (``results``: id -> {status, error, detail, outcomes}) and
    the round as settled."""
    for submission_id, result in results.items():
        await conn.execute(update(RoundSubmission).where(RoundSubmission.id == submission_id).values(**result))
    await conn.execute(
        update(WorldRound)
        .where(WorldRound.round_id == round_id)
        .values(
            state=SETTLED,
            settled_at=datetime.now(UTC),
            settled_tick=settled_tick,
            summary=summary,
            receipt_id=receipt_id,
        )
    )


# -- the API's side --------------------------------------------------------------------------


async def current(conn: AsyncConnection) -> Row | None:
    """The latest round (the accepting one while the engine runs rounds)."""
    statement = select(WorldRound).order_by(WorldRound.round_id.desc()).limit(1)
    return (await conn.execute(statement)).first()


@dataclass(frozen=True)
class Admitted:
    status: str  # "accepted", or "rejected" (no accepting round)
    round_id: int | None
    submission_id: str | None
    reason: str | None = None
    conflict: bool = False  # the key was used with another body
    quota: bool = False  # the agent has made as many submissions to the round as it may
    first_time: bool = True
    member_gone: bool = False  # the agent's member went back to the pool meanwhile
    submission_status: str = ACCEPTED  # a replayed key's: applied or rejected once its round settled


_ACCEPTING = text(
    "SELECT round_id FROM world_rounds WHERE state = 'accepting' ORDER BY round_id DESC LIMIT 1 FOR SHARE"
)


async def submit(
    conn: AsyncConnection,
    agent_id: str,
    member_id: int,
    key: str,
    code: str,
    decision_id: str,
    max_per_round: int,
) -> Admitted:
    """Admit a submission into the accepting round (see the module doc), in the caller's
    transaction: one agent's submissions take turns (an advisory lock), and the accepting round's
    row is share-locked until the caller commits, so closing the round waits for it."""
    await conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('genesis.submit'), hashtext(:a))"), {"a": agent_id})
    # The member is checked, and the action recorded, under the agent's row lock: an idle-member
    # release waits for it and then finds the agent active.
    held = await conn.scalar(select(Agent.member_id).where(Agent.agent_id == agent_id).with_for_update())
    if held != member_id:
        return Admitted(REJECTED, None, None, "the agent's member went back to the pool", member_gone=True)
    digest = body_hash(code)
    s = RoundSubmission
    earlier = (
        await conn.execute(
            select(s.id, s.round_id, s.body_hash, s.status).where(s.agent_id == agent_id, s.idempotency_key == key)
        )
    ).first()
    if earlier is not None:
        if earlier.body_hash != digest:
            return Admitted(
                REJECTED, int(earlier.round_id), earlier.id, "the key was used with another body", conflict=True
            )
        return Admitted(ACCEPTED, int(earlier.round_id), earlier.id, first_time=False, submission_status=earlier.status)
    accepting = await conn.scalar(_ACCEPTING)
    if accepting is None:
        return Admitted(REJECTED, None, None, NOT_ACCEPTING)
    made = await conn.scalar(select(func.count()).select_from(s).where(s.round_id == accepting, s.agent_id == agent_id))
    if (made or 0) >= max_per_round:
        why = f"at most {max_per_round} submissions per agent and round; this round has {made} of yours"
        return Admitted(REJECTED, int(accepting), None, why, quota=True)
    submission_id = new_submission_id()
    await conn.execute(
        insert(RoundSubmission).values(
            id=submission_id,
            round_id=accepting,
            agent_id=agent_id,
            member_id=member_id,
            idempotency_key=key,
            body_hash=digest,
            code=code,
            decision_id=decision_id,
            status=ACCEPTED,
        )
    )
    await conn.execute(update(Agent).where(Agent.agent_id == agent_id).values(last_action_at=func.now()))
    return Admitted(ACCEPTED, int(accepting), submission_id)


async def round_with_submissions(conn: AsyncConnection, round_id: int) -> tuple[Row | None, list[Row]]:
    row = (await conn.execute(select(WorldRound).where(WorldRound.round_id == round_id))).first()
    if row is None:
        return None, []
    s = RoundSubmission
    subs = await conn.execute(
        select(s.id, s.agent_id, s.member_id, s.body_hash, s.status, s.error, s.detail, s.outcomes, s.submitted_at)
        .where(s.round_id == round_id)
        .order_by(s.agent_id, s.seq)
    )
    return row, list(subs.all())


async def assign_member(conn: AsyncConnection, agent_id: str, max_members: int, idle_s: int) -> int | None:
    """A member for ``agent_id``, at its first action (None: ``max_members`` are held). First the
    members of agents idle for ``idle_s`` (no action since) go back to the pool; a new member's
    number is drawn from a sequence, so no agent ever acts through a number (a body, its state)
    another agent had. Assignments take turns under an advisory lock."""
    await conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('genesis.members'))"))
    await release_idle_members(conn, idle_s)
    held = int(await conn.scalar(select(func.count()).where(Agent.member_id.is_not(None))) or 0)
    if held >= max_members:
        return None
    member_id = int(await conn.scalar(text("SELECT nextval('agent_member_ids')")))
    await conn.execute(
        update(Agent).where(Agent.agent_id == agent_id).values(member_id=member_id, member_since=func.now())
    )
    return member_id


async def release_idle_members(conn: AsyncConnection, idle_s: int) -> list[str]:
    """Take the members of agents that have not acted for ``idle_s`` back; their agents' ids."""
    since = func.coalesce(Agent.last_action_at, Agent.member_since)
    idle = Agent.member_id.is_not(None) & (since < func.now() - timedelta(seconds=idle_s))
    rows = await conn.execute(
        update(Agent).where(idle).values(member_id=None, member_since=None).returning(Agent.agent_id)
    )
    return [agent_id for (agent_id,) in rows.all()]


async def give_up_member(conn: AsyncConnection, agent_id: str) -> int | None:
    """The agent's member back to the pool; the number it had (None: it had none)."""
    had = await conn.scalar(select(Agent.member_id).where(Agent.agent_id == agent_id).with_for_update())
    if had is not None:
        await conn.execute(update(Agent).where(Agent.agent_id == agent_id).values(member_id=None, member_since=None))
    return had
