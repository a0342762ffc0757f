"""gepa_clients and programs: repositories connected for GEPA optimisation steps and the program
versions (branch, program.json, status, result) of each step

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gepa_clients",
        sa.Column("client_id", sa.String(40), primary_key=True),
        sa.Column("repo_url", sa.Text, nullable=False),
        sa.Column("installation_id", sa.BigInteger, nullable=True),
        sa.Column("owner_agent_id", sa.String(40), nullable=True),
        sa.Column("egress_allow", JSONB, nullable=False, server_default="[]"),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("default_branch", sa.String(255), nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_table(
        "programs",
        sa.Column("program_id", sa.String(64), primary_key=True),
        sa.Column("client_id", sa.String(40), nullable=False),
        sa.Column("parent_program_id", sa.String(64), nullable=True),
        sa.Column("mutation_type", sa.String(8), nullable=False),
        sa.Column("program_json", JSONB, nullable=True),
        sa.Column("branch_name", sa.String(80), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("result", JSONB, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_programs_client_id", "programs", ["client_id"])
    op.create_index("ix_programs_status", "programs", ["status"])


def downgrade() -> None:
    op.drop_table("programs")
    op.drop_table("gepa_clients")
