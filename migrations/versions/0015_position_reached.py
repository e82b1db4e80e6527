"""request_positions.reached: passes that proposed a position with every earlier one accepted

An adaptive drafter (suffix) proposes fewer than k tokens on some passes, so accepted_{i-1} no longer counts the
passes that reached position i; conditional rates and the break-even fit need this count. NULL on older rows,
where the draft length was fixed and accepted_{i-1} is exact.

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("request_positions") as batch:
        batch.add_column(sa.Column("reached", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("request_positions") as batch:
        batch.drop_column("reached")
