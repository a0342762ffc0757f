"""agents.member_id: the member (a Molbot) each agent controls; world_rounds: the engine's rounds
of agents' actions (accepting -> executing -> settled); round_submissions: every submission, its
idempotency key (scoped to its agent) and what became of it

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("agents", sa.Column("member_id", sa.Integer, nullable=True))
    op.create_index("uq_agents_member_id", "agents", ["member_id"], unique=True)
    op.create_table(
        "world_rounds",
        sa.Column("round_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("opens_tick", sa.BigInteger, nullable=False),
        sa.Column("closes_tick", sa.BigInteger, nullable=False),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("settled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("settled_tick", sa.BigInteger, nullable=True),
        sa.Column("receipt_id", sa.String(40), nullable=True),
        sa.Column("summary", JSONB, nullable=True),
    )
    op.create_index("ix_world_rounds_state", "world_rounds", ["state", "round_id"])
    op.create_table(
        "round_submissions",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("seq", sa.BigInteger, sa.Identity(), nullable=False, unique=True),
        sa.Column("round_id", sa.BigInteger, sa.ForeignKey("world_rounds.round_id"), nullable=False),
        sa.Column("agent_id", sa.String(40), sa.ForeignKey("agents.agent_id", ondelete="CASCADE"), nullable=False),
        sa.Column("member_id", sa.Integer, nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=False),
        sa.Column("body_hash", sa.String(64), nullable=False),
        sa.Column("code", sa.Text, nullable=False),
        sa.Column("decision_id", sa.String(40), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("status", sa.String(12), nullable=False),
        sa.Column("error", sa.String(32), nullable=True),
        sa.Column("detail", sa.Text, nullable=True),
        sa.Column("outcomes", JSONB, nullable=True),
        sa.UniqueConstraint("agent_id", "idempotency_key", name="uq_round_submissions_agent_key"),
    )
    op.create_index("ix_round_submissions_round", "round_submissions", ["round_id", "agent_id", "seq"])


def downgrade() -> None:
    op.drop_table("round_submissions")
    op.drop_table("world_rounds")
    op.drop_index("uq_agents_member_id", table_name="agents")
    op.drop_column("agents", "member_id")
