"""mutations.lineage: where a proposal's code came from — the trait versions it was made from
(live when it was proposed), the operators applied, the operator's seed, and its origin
(the built-in operator, an LLM provider, or an agent); null for mutations recorded before

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mutations", sa.Column("lineage", JSONB, nullable=True))


def downgrade() -> None:
    op.drop_column("mutations", "lineage")
