"""world_snapshots: every 30th WorldSnapshot of the engine (logic-flow.md, telemetry step 5d)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "world_snapshots",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("tick", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("timestamp", sa.Float, nullable=False),
        sa.Column("entity_count", sa.Integer, nullable=False),
        sa.Column("avg_energy", sa.Float, nullable=False),
        sa.Column("births_last_period", sa.Integer, nullable=False),
        sa.Column("deaths_last_period", sa.Integer, nullable=False),
        sa.Column("death_starvation", sa.Integer, nullable=False),
        sa.Column("death_age", sa.Integer, nullable=False),
        sa.Column("death_collision", sa.Integer, nullable=False),
        sa.Column("resource_density", sa.Float, nullable=False),
        sa.Column("resource_count", sa.Integer, nullable=False),
        sa.Column("trait_diversity", sa.Integer, nullable=False),
        sa.Column("dominant_trait", sa.String(64)),
        sa.Column("temperature", sa.Float, nullable=False),
        sa.Column("tick_overruns", sa.BigInteger, nullable=False),
        sa.Column("ticks_per_second", sa.Float, nullable=False),
        sa.Column("state_hash", sa.String(64), nullable=False),
        sa.Column("data", postgresql.JSONB, nullable=False),
    )
    op.create_index("ix_world_snapshots_run_id", "world_snapshots", ["run_id"])
    op.create_index("ix_world_snapshots_tick", "world_snapshots", ["tick"])


def downgrade() -> None:
    op.drop_table("world_snapshots")
