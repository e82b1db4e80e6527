"""requests.per_source: a hybrid drafter's passes and per-position counts by the source that drafted them

A hybrid drafts each pass from the suffix trees or from the EAGLE-3 head; its acceptance means little until it is
split by source. NULL for requests one source drafted and for older rows.

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("per_source", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("per_source")
