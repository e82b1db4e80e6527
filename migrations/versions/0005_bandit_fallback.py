"""fallback flag on bandit_steps: the safety fallback chose k=0

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("bandit_steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("fallback", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("bandit_steps", schema=None) as batch_op:
        batch_op.drop_column("fallback")
