"""p_not_best on bandit_steps: the model-based policy's doubt gets its own column

Before this revision the model-based policy stored P(predicted best arm is not the
best) in ``epsilon``; those values move here.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("bandit_steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("p_not_best", sa.Float(), nullable=True))
    op.execute("UPDATE bandit_steps SET p_not_best = epsilon WHERE policy LIKE '%model_based'")


def downgrade() -> None:
    op.execute("UPDATE bandit_steps SET epsilon = p_not_best WHERE p_not_best IS NOT NULL")
    with op.batch_alter_table("bandit_steps", schema=None) as batch_op:
        batch_op.drop_column("p_not_best")
