"""trait_quarantines: the live trait versions the engine quarantined (one row per mutation; the
engine is the only writer)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "trait_quarantines",
        sa.Column("mutation_id", sa.String(40), primary_key=True),
        sa.Column("trait_name", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("quarantined_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("ix_trait_quarantines_trait_name", "trait_quarantines", ["trait_name"])


def downgrade() -> None:
    op.drop_table("trait_quarantines")
