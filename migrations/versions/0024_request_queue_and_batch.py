"""requests.queue_s and requests.batch_size: a served request's wait before its prefill and its mean batch

Phoenix's server decodes requests together: the time a request waited for a row and the batch its passes ran in
are part of what its latency means. NULL for requests decoded one at a time and for older rows.

Revision ID: 0024
Revises: 0023
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("queue_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("batch_size", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("batch_size")
        batch.drop_column("queue_s")
