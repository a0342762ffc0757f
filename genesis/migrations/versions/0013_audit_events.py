"""audit_events: the audit projection of the world's journal (journal/audit.py), and
audit_projection: how far the projection has read the journal (one row)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("seq", sa.BigInteger, primary_key=True),
        sa.Column("idx", sa.SmallInteger, primary_key=True),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("tick", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("agent_id", sa.String(64), nullable=True),
        sa.Column("mutation_id", sa.String(40), nullable=True),
        sa.Column("trait_name", sa.String(64), nullable=True),
        sa.Column("cause", sa.String(500), nullable=True),
        sa.Column("summary", JSONB, nullable=False),
    )
    for column in ("kind", "agent_id", "mutation_id", "trait_name", "epoch"):
        op.create_index(f"ix_audit_events_{column}_seq", "audit_events", [column, "seq"])
    op.create_index("ix_audit_events_tick", "audit_events", ["tick"])
    op.create_table(
        "audit_projection",
        sa.Column("id", sa.SmallInteger, primary_key=True),
        sa.Column("journal_dir", sa.String(500), nullable=False),
        sa.Column("projected_seq", sa.BigInteger, nullable=False),
        sa.Column("chain_head", sa.LargeBinary, nullable=False),
        sa.Column("params", JSONB, nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("audit_projection")
    op.drop_table("audit_events")
