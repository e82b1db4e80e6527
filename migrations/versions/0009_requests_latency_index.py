"""index requests by (mode, run_id, warmup, latency_s): latency percentiles walk the index instead of sorting

mode leads so that queries constrained by run alone keep ix_requests_run_mode, which walks a run in insertion
order; this one would walk it in latency order, a poor page locality.

Revision ID: 0009
Revises: 0008
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_requests_mode_run_latency", "requests", ["mode", "run_id", "warmup", "latency_s"])


def downgrade() -> None:
    op.drop_index("ix_requests_mode_run_latency", table_name="requests")
