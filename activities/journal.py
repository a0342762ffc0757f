"""Activities of the world's journal: a replay that checks the recorded state hashes (run as a
subprocess, ``python -m engine.core.verify``, so a long replay holds neither the worker's event loop nor
its GIL; its progress becomes heartbeats) and the signature of an audit export's manifest (the
worker holds the signing key; the API does not)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys

from sqlalchemy import select
from sqlalchemy.ext.asyncio import async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import names
from audit import receipts
from genesis import canonical, signing
from genesis.config import Settings
from genesis.db.models import ReceiptRow
from genesis.dto import AuditManifestRequest, ReplayVerifyReport, ReplayVerifyRequest

REPLAY_UNAVAILABLE = "REPLAY_UNAVAILABLE"


class JournalActivities:
    def __init__(self, settings: Settings, sessions: async_sessionmaker, keyring: signing.Keyring) -> None:
        self._settings = settings
        self._sessions = sessions
        self._signer = receipts.Signer(sessions, keyring)

    @activity.defn(name=names.VERIFY_REPLAY)
    async def verify_replay(self, request: ReplayVerifyRequest) -> ReplayVerifyReport:
        """Replay the journal over the range (no trait host) and compare every state hash."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "engine.core.verify",
            "--journal",
            str(self._settings.journal_dir),
            "--from-tick",
            str(request.from_tick),
            "--to-tick",
            str(request.to_tick),
            "--archive",
            str(self._settings.journal_archive_dir),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        answer: dict | None = None
        try:
            assert proc.stdout is not None
            async for raw in proc.stdout:
                try:
                    line = json.loads(raw)
                except json.JSONDecodeError:
                    continue
                if "progress" in line:
                    activity.heartbeat(line["progress"])
                else:
                    answer = line
            await proc.wait()
        except asyncio.CancelledError:
            proc.kill()
            await proc.wait()
            raise
        if answer is not None and "report" in answer:
            return ReplayVerifyReport(**answer["report"])
        if answer is not None and "error" in answer:
            raise ApplicationError(str(answer["error"]), type=REPLAY_UNAVAILABLE, non_retryable=True)
        stderr = (await proc.stderr.read()).decode(errors="replace")[-500:] if proc.stderr else ""
        raise ApplicationError(f"the replay stopped with exit status {proc.returncode}: {stderr}")

    @activity.defn(name=names.SIGN_AUDIT_MANIFEST)
    async def sign_audit_manifest(self, request: AuditManifestRequest) -> dict:
        """A signed ``audit.export`` receipt whose body is the manifest (one per manifest)."""
        digest = hashlib.sha256(canonical.encode(request.manifest)).hexdigest()
        topic = f"export:{digest}"
        keyring = await self._signer.ready()
        async with self._sessions() as session, session.begin():
            await receipts.issue(session, keyring, "audit.export", topic, {}, {"manifest": request.manifest})
        async with self._sessions() as session:
            row = await session.scalar(select(ReceiptRow).where(ReceiptRow.topic == topic))
        assert row is not None
        return receipts.as_json(row)
