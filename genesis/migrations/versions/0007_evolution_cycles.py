"""evolution_cycles: one row per EvolutionCycleWorkflow (stage, plan, code, mutation, LLM token
usage and estimated cost, error)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "evolution_cycles",
        sa.Column("trigger_id", sa.String(120), primary_key=True),
        sa.Column("workflow_id", sa.String(140), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("problem_type", sa.String(64)),
        sa.Column("severity", sa.String(16)),
        sa.Column("stage", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("action_type", sa.String(32)),
        sa.Column("plan", JSONB),
        sa.Column("code", sa.Text),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("mutation_id", sa.String(40)),
        sa.Column("mutation_status", sa.String(32)),
        sa.Column("params_change", JSONB),
        sa.Column("provider", sa.String(32)),
        sa.Column("model", sa.String(128)),
        sa.Column("llm_calls", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("tokens_in", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("tokens_out", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("estimated_cost_usd", sa.Float, nullable=False, server_default=sa.text("0")),
        sa.Column("error", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_evolution_cycles_status", "evolution_cycles", ["status"])
    op.create_index("ix_evolution_cycles_mutation_id", "evolution_cycles", ["mutation_id"])
    op.create_index("ix_evolution_cycles_created_at", "evolution_cycles", ["created_at"])


def downgrade() -> None:
    op.drop_table("evolution_cycles")
