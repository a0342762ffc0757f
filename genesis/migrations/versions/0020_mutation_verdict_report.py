"""mutations.verdict_report: the experiment that decided a trait's fitness verdict
(genesis/verdicts.py, activities/verdict_experiment.py)

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mutations", sa.Column("verdict_report", JSONB))


def downgrade() -> None:
    op.drop_column("mutations", "verdict_report")
