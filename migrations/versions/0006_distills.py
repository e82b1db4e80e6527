"""distills: draft distillation jobs, linked to their before/after runs

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "distills",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("out_dir", sa.String(length=500), nullable=False),
        sa.Column("losses", sa.JSON(), nullable=False),
        sa.Column("stage_seconds", sa.JSON(), nullable=False),
        sa.Column("before_run_id", sa.Integer(), nullable=True),
        sa.Column("after_run_id", sa.Integer(), nullable=True),
        sa.Column("evaluation", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["before_run_id"], ["runs.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["after_run_id"], ["runs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("distills", schema=None) as batch_op:
        batch_op.create_index("ix_distills_before_run_id", ["before_run_id"], unique=False)
        batch_op.create_index("ix_distills_after_run_id", ["after_run_id"], unique=False)


def downgrade() -> None:
    op.drop_table("distills")
