"""Postgres is the system of record: the durable mutation record the REST API reads."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, DateTime, Index, String, Text, func, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Mutation(Base):
    __tablename__ = "mutations"

    mutation_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    agent_id: Mapped[str] = mapped_column(String(128), index=True)
    task_id: Mapped[str | None] = mapped_column(String(64))
    trait_name: Mapped[str] = mapped_column(String(64), index=True)
    goal: Mapped[str] = mapped_column(Text, default="")
    code: Mapped[str] = mapped_column(Text)
    # SHA-256 of the normalised source (set by the gatekeeper once the code parses).
    code_hash: Mapped[str | None] = mapped_column(String(64))
    # True while this mutation holds its code_hash for deduplication (released on rejection).
    holds_code_hash: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    class_name: Mapped[str | None] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(32), index=True)
    failure_reason_code: Mapped[str | None] = mapped_column(String(64))
    validation_log: Mapped[list[str]] = mapped_column(JSONB, default=list)
    sandbox_report: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    workflow_id: Mapped[str] = mapped_column(String(80))
    client_ip: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        # At most one live (non-rejected) mutation per normalised code: DUPLICATE_CODE, race-free.
        Index(
            "uq_mutations_live_code_hash",
            "code_hash",
            unique=True,
            postgresql_where=text("holds_code_hash"),
        ),
    )
