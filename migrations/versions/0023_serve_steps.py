"""serve_steps: each step of Phoenix's server loop, with the decision behind it

A served run's requests share forwards, so what decided them is per step, not per request: the batch it ran,
the widest row, the k the tuner chose for the batch's drafter (and whether it explored), the throughput it
expected at that k and with speculation off, and what the step drafted, accepted and emitted.

Revision ID: 0023
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "serve_steps",
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("step", sa.Integer(), primary_key=True),
        sa.Column("at_s", sa.Float(), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("drafter", sa.String(40), nullable=False),
        sa.Column("k", sa.Integer(), nullable=True),
        sa.Column("explored", sa.Boolean(), nullable=True),
        sa.Column("estimate", sa.Float(), nullable=True),
        sa.Column("estimate_off", sa.Float(), nullable=True),
        sa.Column("draft_s", sa.Float(), nullable=False),
        sa.Column("verify_s", sa.Float(), nullable=False),
        sa.Column("proposed", sa.Integer(), nullable=False),
        sa.Column("accepted", sa.Integer(), nullable=False),
        sa.Column("emitted", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("serve_steps")
