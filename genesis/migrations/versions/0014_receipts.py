"""receipts: signed receipts of the mutation pipeline and the world (genesis/signing.py), one
linear chain; receipt_keys: the public keys that verify them (the API serves them without any
private key)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "receipts",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("seq", sa.BigInteger, sa.Identity(), nullable=False, unique=True),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=False),
        sa.Column("mutation_id", sa.String(40), nullable=True),
        sa.Column("agent_id", sa.String(128), nullable=True),
        sa.Column("trait_name", sa.String(64), nullable=True),
        # what it is about, once: (mutation, stage) or (journal record, event)
        sa.Column("topic", sa.String(120), nullable=False, unique=True),
        sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False, unique=True),
        sa.Column("prev_hash", sa.String(64), nullable=True),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("journal_seq", sa.BigInteger, nullable=True),
    )
    for column in ("mutation_id", "agent_id", "kind"):
        op.create_index(f"ix_receipts_{column}_seq", "receipts", [column, "seq"])
    op.create_index("ix_receipts_unjournaled", "receipts", ["seq"], postgresql_where=sa.text("journal_seq IS NULL"))
    op.create_table(
        "receipt_keys",
        sa.Column("key_id", sa.String(40), primary_key=True),
        sa.Column("public_key", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("receipt_keys")
    op.drop_table("receipts")
