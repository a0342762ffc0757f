"""governance_proposals: proposals to change the world's rules (a patch of the manifest), their
shadow reports, decisions and what they applied (governance/lifecycle.py)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "governance_proposals",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("seq", sa.BigInteger, sa.Identity(), nullable=False, unique=True),
        sa.Column("author", sa.String(128), nullable=False),
        sa.Column("author_role", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("base_version", sa.Integer, nullable=False),
        sa.Column("base_hash", sa.String(64), nullable=False),
        sa.Column("ops", JSONB, nullable=False),
        sa.Column("document", JSONB, nullable=False),
        sa.Column("candidate_hash", sa.String(64), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("report", JSONB, nullable=True),
        sa.Column("report_hash", sa.String(64), nullable=True),
        sa.Column("decided_by", sa.String(128), nullable=True),
        sa.Column("decision_reason", sa.Text, nullable=True),
        sa.Column("applied_version", sa.Integer, nullable=True),
        sa.Column("failure", sa.Text, nullable=True),
        sa.Column("workflow_id", sa.String(80), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_governance_proposals_status", "governance_proposals", ["status", "seq"])


def downgrade() -> None:
    op.drop_table("governance_proposals")
