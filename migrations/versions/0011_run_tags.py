"""run_tags: free-form tags of a run, one row each, so filtering by tag is an indexed join on any database

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_tags",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("tag", sa.String(length=100), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "tag"),
    )
    op.create_index("ix_run_tags_tag", "run_tags", ["tag"])


def downgrade() -> None:
    op.drop_index("ix_run_tags_tag", table_name="run_tags")
    op.drop_table("run_tags")
