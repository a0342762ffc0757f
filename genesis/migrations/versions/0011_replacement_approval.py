"""mutations.replacement_approved_by: who allowed a proposal to replace a trait version another
agent made (an operator's key, or the built-in evolution); activation checks the live version's
owner again and needs this when the owner is not the proposer

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mutations", sa.Column("replacement_approved_by", sa.String(160), nullable=True))


def downgrade() -> None:
    op.drop_column("mutations", "replacement_approved_by")
