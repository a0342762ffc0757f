"""agents.member_since and agents.last_action_at, and the sequence member ids are drawn from: a
member is assigned at an agent's first action, returns to the pool when its agent is idle for the
manifest's rounds.member_idle_sec or gives it up, and its number is never given to another agent.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("agents", sa.Column("member_since", sa.DateTime(timezone=True)))
    op.add_column("agents", sa.Column("last_action_at", sa.DateTime(timezone=True)))
    op.execute("UPDATE agents SET member_since = created_at WHERE member_id IS NOT NULL")
    op.execute("CREATE SEQUENCE agent_member_ids START WITH 1")
    op.execute(
        "SELECT setval('agent_member_ids', GREATEST((SELECT COALESCE(MAX(member_id), 0) FROM agents), "
        "(SELECT COALESCE(MAX(member_id), 0) FROM round_submissions)) + 1, false)"
    )


def downgrade() -> None:
    op.execute("DROP SEQUENCE agent_member_ids")
    op.drop_column("agents", "last_action_at")
    op.drop_column("agents", "member_since")
