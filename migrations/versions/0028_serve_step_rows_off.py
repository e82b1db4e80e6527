"""serve_steps.rows_off: the rows a step held at k = 0 by their own rolling acceptance

The tuner chooses k per drafter for the batch; a row whose own recent passes accept less than the break-even its
k needs at that batch drafts nothing for a while, then probes again. 0 for older rows, whose tuner had no such rule.

Revision ID: 0028
Revises: 0027
"""

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("serve_steps") as batch:
        batch.add_column(sa.Column("rows_off", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("serve_steps") as batch:
        batch.drop_column("rows_off")
