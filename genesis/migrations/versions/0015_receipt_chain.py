"""receipts: the chain is linear by construction. Each receipt names an existing receipt as its
previous one (a foreign key to its hash), no two receipts name the same one, and only one has none
(the first): an issuer that skipped the chain's lock could not fork it, only fail.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ux_receipts_prev_hash", "receipts", ["prev_hash"], unique=True, postgresql_nulls_not_distinct=True)
    op.create_foreign_key("fk_receipts_prev_hash", "receipts", "receipts", ["prev_hash"], ["hash"])


def downgrade() -> None:
    op.drop_constraint("fk_receipts_prev_hash", "receipts", type_="foreignkey")
    op.drop_index("ux_receipts_prev_hash", "receipts")
