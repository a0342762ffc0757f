"""mutations.notify_url: where a proposal's status changes are POSTed (signed webhooks)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mutations", sa.Column("notify_url", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("mutations", "notify_url")
