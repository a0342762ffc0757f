"""manifests: the versions of the world's rules (governance/manifest.py); capability_grants: what
each agent may do, with expiry and revocation; policy_decisions: every decision of the policy gate
(governance/policy.py), an outbox the engine carries into the journal. Agents registered before
hold the default grants.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

DEFAULT_CAPABILITIES = ("traits.propose", "traits.modify", "actions.submit", "rules.propose")


def upgrade() -> None:
    op.create_table(
        "manifests",
        sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("hash", sa.String(64), nullable=False),  # a later version may restore an earlier one
        sa.Column("document", JSONB, nullable=False),
        sa.Column("cause", sa.String(120), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_table(
        "capability_grants",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("agent_id", sa.String(40), sa.ForeignKey("agents.agent_id", ondelete="CASCADE"), nullable=False),
        sa.Column("capability", sa.String(40), nullable=False),
        sa.Column("granted_by", sa.String(128), nullable=False),
        sa.Column("granted_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by", sa.String(128), nullable=True),
    )
    op.create_index("ix_capability_grants_agent", "capability_grants", ["agent_id", "capability"])
    op.create_table(
        "policy_decisions",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("seq", sa.BigInteger, sa.Identity(), nullable=False, unique=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("action", sa.String(40), nullable=False),
        sa.Column("subject", sa.String(128), nullable=True),
        sa.Column("resource", sa.String(200), nullable=False),
        sa.Column("decision", sa.String(8), nullable=False),
        sa.Column("rule", sa.String(64), nullable=False),
        sa.Column("manifest_hash", sa.String(64), nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("journal_seq", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_policy_decisions_subject_seq", "policy_decisions", ["subject", "seq"])
    op.create_index(
        "ix_policy_decisions_unjournaled", "policy_decisions", ["seq"], postgresql_where=sa.text("journal_seq IS NULL")
    )
    grants = ", ".join(f"('{c}')" for c in DEFAULT_CAPABILITIES)
    op.execute(
        "INSERT INTO capability_grants (id, agent_id, capability, granted_by) "
        "SELECT 'cap_' || substr(md5(a.agent_id || c.capability), 1, 16), a.agent_id, c.capability, 'migration' "
        f"FROM agents a CROSS JOIN (VALUES {grants}) AS c(capability)"
    )


def downgrade() -> None:
    op.drop_table("policy_decisions")
    op.drop_table("capability_grants")
    op.drop_table("manifests")
