"""programs.second_parent_program_id: a crossover (merge step) has two parents.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("programs", sa.Column("second_parent_program_id", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("programs", "second_parent_program_id")
