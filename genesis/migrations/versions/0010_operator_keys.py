"""operator_keys: hashed keys of operators (genesis operator create-key)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "operator_keys",
        sa.Column("key_prefix", sa.String(16), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("key_hash", sa.String(128), nullable=False),
        sa.Column("key_scheme", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("operator_keys")
