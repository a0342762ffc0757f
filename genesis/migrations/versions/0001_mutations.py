"""mutations: the durable mutation record

Revision ID: 0001
Revises:
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mutations",
        sa.Column("mutation_id", sa.String(40), primary_key=True),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("task_id", sa.String(64)),
        sa.Column("trait_name", sa.String(64), nullable=False),
        sa.Column("goal", sa.Text, nullable=False, server_default=""),
        sa.Column("code", sa.Text, nullable=False),
        sa.Column("code_hash", sa.String(64)),
        sa.Column("holds_code_hash", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("class_name", sa.String(128)),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("failure_reason_code", sa.String(64)),
        sa.Column("validation_log", postgresql.JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
        sa.Column("sandbox_report", postgresql.JSONB),
        sa.Column("workflow_id", sa.String(80), nullable=False),
        sa.Column("client_ip", sa.String(64)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("ix_mutations_agent_id", "mutations", ["agent_id"])
    op.create_index("ix_mutations_trait_name", "mutations", ["trait_name"])
    op.create_index("ix_mutations_status", "mutations", ["status"])
    op.create_index(
        "uq_mutations_live_code_hash",
        "mutations",
        ["code_hash"],
        unique=True,
        postgresql_where=sa.text("holds_code_hash"),
    )


def downgrade() -> None:
    op.drop_table("mutations")
