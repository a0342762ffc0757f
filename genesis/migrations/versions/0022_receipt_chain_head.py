"""receipt_chain_head: the receipt chain's signed head (its newest receipt and its length), so a
listing cut at its end shows.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "receipt_chain_head",
        sa.Column("id", sa.SmallInteger(), primary_key=True),
        sa.Column("newest_hash", sa.String(64), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("signed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.CheckConstraint("id = 1", name="ck_receipt_chain_head_one_row"),
    )


def downgrade() -> None:
    op.drop_table("receipt_chain_head")
