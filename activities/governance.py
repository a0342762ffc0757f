"""Activities of the GovernanceWorkflow: the shadow run of a proposal (``python -m engine.core.shadow``
in a subprocess, on the world's journal, so it never touches the live world), each decision, and
applying the approved manifest. Every step moves the proposal along its lifecycle and issues a
signed receipt in the same transaction (the engine carries receipts into the journal)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import names
from audit import receipts
from genesis import signing
from genesis.config import Settings
from genesis.dto import GovernanceDecision, GovernanceOutcome
from governance import lifecycle
from governance.records import manifests, proposals

SHADOW_FAILED = "SHADOW_FAILED"
SHADOW_TIMEOUT_S = 600


class GovernanceActivities:
    def __init__(self, settings: Settings, sessions: async_sessionmaker, keyring: signing.Keyring) -> None:
        self._settings = settings
        self._sessions = sessions
        self._signer = receipts.Signer(sessions, keyring)

    async def _step(self, proposal_id: str, to: str, kind: str, body: dict[str, Any], **fields: Any) -> Any:
        """Move the proposal and sign the step's receipt, in one transaction; the row before."""
        keyring = await self._signer.ready()
        async with self._sessions() as session, session.begin():
            conn: AsyncConnection = await session.connection()
            try:
                before = await proposals.move(conn, proposal_id, to, **fields)
            except lifecycle.IllegalTransition as exc:
                raise ApplicationError(str(exc), type="ILLEGAL_TRANSITION", non_retryable=True) from None
            subject = {"proposal_id": proposal_id}
            if before.author_role == "agent":
                subject["agent_id"] = before.author
            await receipts.issue(session, keyring, kind, f"governance:{proposal_id}:{to}", subject, body)
        return before

    @activity.defn(name=names.SHADOW_PROPOSAL)
    async def shadow_proposal(self, proposal_id: str) -> str:
        """Run the proposal's shadow; the report's hash (the proposal now awaits approval)."""
        async with self._sessions() as session:
            row = await proposals.get(await session.connection(), proposal_id)
        if row is None:
            raise ApplicationError(f"no proposal {proposal_id}", non_retryable=True)
        if row.status == lifecycle.AWAITING_APPROVAL and row.report_hash:  # a retried activity
            return row.report_hash
        if row.status == lifecycle.PROPOSED:
            body = {"ops": row.ops, "base_hash": row.base_hash, "candidate_hash": row.candidate_hash}
            await self._step(proposal_id, lifecycle.SHADOWING, "governance.proposed", body)
        async with self._sessions() as session:
            base = await manifests.current(await session.connection(), self._settings)
        # the rules in force say how long a shadow runs, never the candidate under test
        ticks = base.manifest.governance.shadow_ticks
        answer = await self._run_shadow(ticks, base.document.get("params", {}), row.document.get("params", {}))
        if "error" in answer:
            await self._step(
                proposal_id,
                lifecycle.FAILED,
                "governance.failed",
                {"failure": answer["error"]},
                failure=answer["error"],
            )
            raise ApplicationError(f"the shadow run failed: {answer['error']}", type=SHADOW_FAILED, non_retryable=True)
        report, report_hash = answer["report"], answer["report_hash"]
        await self._step(
            proposal_id,
            lifecycle.AWAITING_APPROVAL,
            "governance.shadowed",
            {"report_hash": report_hash, "differences": report["differences"], "snapshot": report["snapshot"]},
            report=report,
            report_hash=report_hash,
        )
        return report_hash

    async def _run_shadow(self, ticks: int, baseline: dict, candidate: dict) -> dict[str, Any]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "engine.core.shadow",
            "--journal",
            str(self._settings.journal_dir),
            "--ticks",
            str(ticks),
            "--baseline",
            json.dumps(baseline),
            "--candidate",
            json.dumps(candidate),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            preexec_fn=_behind_the_world,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), SHADOW_TIMEOUT_S)
        except (TimeoutError, asyncio.CancelledError):
            proc.kill()
            await proc.wait()
            raise
        try:
            answer = json.loads(out)
        except json.JSONDecodeError:
            raise ApplicationError(
                f"the shadow run stopped with exit status {proc.returncode}: {err.decode(errors='replace')[-300:]}"
            ) from None
        return answer

    @activity.defn(name=names.DECIDE_PROPOSAL)
    async def decide_proposal(self, proposal_id: str, decision: GovernanceDecision | None) -> str:
        """Record an approval, a rejection, or (no decision) the expiry; the new status."""
        if decision is None:
            to, kind, body, fields = lifecycle.EXPIRED, "governance.expired", {}, {}
        elif decision.decision == "approve":
            to, kind = lifecycle.APPROVED, "governance.approved"
            body = {"by": decision.by, "report_hash": decision.report_hash}
            fields = {"decided_by": decision.by}
        else:
            to, kind = lifecycle.REJECTED, "governance.rejected"
            body = {"by": decision.by, "reason": decision.reason}
            fields = {"decided_by": decision.by, "decision_reason": decision.reason[:2000]}
        async with self._sessions() as session:
            row = await proposals.get(await session.connection(), proposal_id)
        if row is not None and row.status == to:  # a retried activity
            return to
        await self._step(proposal_id, to, kind, body, **fields)
        return to

    @activity.defn(name=names.APPLY_PROPOSAL)
    async def apply_proposal(self, proposal_id: str) -> GovernanceOutcome:
        """Put the approved manifest in force, unless the manifest moved since the proposal."""
        async with self._sessions() as session:
            row = await proposals.get(await session.connection(), proposal_id)
        if row is None:
            raise ApplicationError(f"no proposal {proposal_id}", non_retryable=True)
        if row.status == lifecycle.APPLIED:
            return GovernanceOutcome(proposal_id=proposal_id, status=row.status, applied_version=row.applied_version)
        keyring = await self._signer.ready()
        try:  # the new version and the proposal's step in one transaction: both or neither
            async with self._sessions() as session, session.begin():
                conn = await session.connection()
                now = await manifests.record(conn, row.document, f"governance:{proposal_id}", row.base_hash)
                await proposals.move(conn, proposal_id, lifecycle.APPLIED, applied_version=now.version)
                subject = {"proposal_id": proposal_id}
                if row.author_role == "agent":
                    subject["agent_id"] = row.author
                body = {"version": now.version, "hash": now.hash}
                topic = f"governance:{proposal_id}:{lifecycle.APPLIED}"
                await receipts.issue(session, keyring, "governance.applied", topic, subject, body)
        except manifests.ManifestMoved as exc:
            why = f"the manifest moved since the proposal was shadowed: {exc}"
            await self._step(proposal_id, lifecycle.FAILED, "governance.failed", {"failure": why}, failure=why)
            return GovernanceOutcome(proposal_id=proposal_id, status=lifecycle.FAILED, detail=why)
        except lifecycle.IllegalTransition as exc:
            raise ApplicationError(str(exc), type="ILLEGAL_TRANSITION", non_retryable=True) from None
        return GovernanceOutcome(
            proposal_id=proposal_id, status=lifecycle.APPLIED, report_hash=row.report_hash, applied_version=now.version
        )


def _behind_the_world() -> None:
    """A shadow run yields the CPU to the live world's engine on the same machine (it can wait;
    the world's ticks cannot)."""
    os.nice(10)
