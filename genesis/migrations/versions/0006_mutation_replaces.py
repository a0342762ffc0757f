"""mutations.replaces_trait / replaces_version / replaced_version / restored_version: modifying a
live trait (a proposal's ``replaces``), the version its activation replaced, the version its
rollback restored

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mutations", sa.Column("replaces_trait", sa.String(64), nullable=True))
    op.add_column("mutations", sa.Column("replaces_version", sa.Integer, nullable=True))
    op.add_column("mutations", sa.Column("replaced_version", sa.Integer, nullable=True))
    op.add_column("mutations", sa.Column("restored_version", sa.Integer, nullable=True))


def downgrade() -> None:
    for column in ("restored_version", "replaced_version", "replaces_version", "replaces_trait"):
        op.drop_column("mutations", column)
