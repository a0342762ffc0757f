"""trait_versions and the activation/observation fields of mutations

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mutations", sa.Column("trait_version", sa.Integer))
    op.add_column("mutations", sa.Column("activated_at", sa.DateTime(timezone=True)))
    op.add_column("mutations", sa.Column("effects", postgresql.JSONB))
    op.add_column("mutations", sa.Column("fitness_verdict", sa.String(16)))
    op.add_column("mutations", sa.Column("rollback_reason", sa.Text))
    op.create_table(
        "trait_versions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("trait_name", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("mutation_id", sa.String(40), nullable=False, unique=True),
        sa.Column("class_name", sa.String(128), nullable=False),
        sa.Column("code", sa.Text, nullable=False),
        sa.Column("code_hash", sa.String(64), nullable=False),
        sa.Column("file_path", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("ix_trait_versions_trait_name", "trait_versions", ["trait_name"])
    op.create_index("ix_trait_versions_status", "trait_versions", ["status"])
    op.create_index("uq_trait_versions_name_version", "trait_versions", ["trait_name", "version"], unique=True)
    op.create_index(
        "uq_trait_versions_one_active",
        "trait_versions",
        ["trait_name"],
        unique=True,
        postgresql_where=sa.text("status = 'active'"),
    )


def downgrade() -> None:
    op.drop_table("trait_versions")
    for column in ("rollback_reason", "fitness_verdict", "effects", "activated_at", "trait_version"):
        op.drop_column("mutations", column)
