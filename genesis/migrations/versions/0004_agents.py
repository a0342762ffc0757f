"""agents: registered external agents and their hashed API keys (external-agents-phase2.md)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("agent_id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("key_prefix", sa.String(16), nullable=False),
        sa.Column("key_hash", sa.String(128), nullable=False),
        sa.Column("key_scheme", sa.String(32), nullable=False),
        sa.Column("client_ip", sa.String(64)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("uq_agents_key_prefix", "agents", ["key_prefix"], unique=True)


def downgrade() -> None:
    op.drop_table("agents")
