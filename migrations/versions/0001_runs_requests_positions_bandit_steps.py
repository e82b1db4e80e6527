"""runs, requests, positions, bandit steps

Revision ID: 0001
Revises:
Create Date: 2026-11-29 11:11:47.386836
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("target", sa.String(length=500), nullable=False),
        sa.Column("draft", sa.String(length=500), nullable=True),
        sa.Column("progress_done", sa.Integer(), nullable=False),
        sa.Column("progress_total", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_status"), ["status"], unique=False)

    op.create_table(
        "requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(length=40), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("prompt_id", sa.String(length=200), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("latency_s", sa.Float(), nullable=False),
        sa.Column("ttft_s", sa.Float(), nullable=True),
        sa.Column("tokens_per_s", sa.Float(), nullable=False),
        sa.Column("proposed", sa.Integer(), nullable=False),
        sa.Column("accepted", sa.Integer(), nullable=False),
        sa.Column("passes", sa.Integer(), nullable=False),
        sa.Column("draft_s", sa.Float(), nullable=False),
        sa.Column("verify_s", sa.Float(), nullable=False),
        sa.Column("output_text", sa.Text(), nullable=False),
        sa.Column("output_sha256", sa.String(length=64), nullable=False),
        sa.Column("identical", sa.Boolean(), nullable=True),
        sa.Column("diverged_at", sa.Integer(), nullable=True),
        sa.Column("trace_id", sa.String(length=64), nullable=True),
        sa.Column("warmup", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.create_index("ix_requests_run_mode", ["run_id", "mode", "warmup"], unique=False)
        batch_op.create_index("ix_requests_run_seq", ["run_id", "seq"], unique=False)
        batch_op.create_index("ix_requests_trace_id", ["trace_id"], unique=False)

    op.create_table(
        "bandit_steps",
        sa.Column("request_id", sa.Integer(), nullable=False),
        sa.Column("t", sa.Integer(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("explored", sa.Boolean(), nullable=False),
        sa.Column("chosen_k", sa.Integer(), nullable=False),
        sa.Column("arm_means", sa.JSON(), nullable=False),
        sa.Column("arm_counts", sa.JSON(), nullable=False),
        sa.Column("reward", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["request_id"], ["requests.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("request_id"),
    )
    op.create_table(
        "request_positions",
        sa.Column("request_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("proposed", sa.Integer(), nullable=False),
        sa.Column("accepted", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["request_id"], ["requests.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("request_id", "position"),
    )


def downgrade() -> None:
    op.drop_table("request_positions")
    op.drop_table("bandit_steps")
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.drop_index("ix_requests_trace_id")
        batch_op.drop_index("ix_requests_run_seq")
        batch_op.drop_index("ix_requests_run_mode")

    op.drop_table("requests")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_status"))

    op.drop_table("runs")
