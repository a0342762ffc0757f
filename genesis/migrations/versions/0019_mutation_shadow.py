"""mutations.shadow_report: a held mutation's trait run beside the live world in a fork of it
(activities/trait_shadow.py), shown to the operator who decides on it

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mutations", sa.Column("shadow_report", JSONB))


def downgrade() -> None:
    op.drop_column("mutations", "shadow_report")
