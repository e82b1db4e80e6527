"""epsilon on bandit_steps becomes nullable: only epsilon-greedy has one

Rows of other policies held 0.0 (or, for model-based, the value 0007 copied to
p_not_best); they become NULL.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("bandit_steps", schema=None) as batch_op:
        batch_op.alter_column("epsilon", existing_type=sa.Float(), nullable=True)
    op.execute("UPDATE bandit_steps SET epsilon = NULL WHERE policy IS NOT NULL AND policy NOT LIKE '%epsilon_greedy'")


def downgrade() -> None:
    op.execute("UPDATE bandit_steps SET epsilon = 0.0 WHERE epsilon IS NULL")
    with op.batch_alter_table("bandit_steps", schema=None) as batch_op:
        batch_op.alter_column("epsilon", existing_type=sa.Float(), nullable=False)
