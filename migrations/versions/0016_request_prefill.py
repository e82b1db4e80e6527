"""requests.prefill_s and requests.draft_prefill_s: decode-pass times kept apart from prefill

verify_s used to include the target's prefill and draft_s the draft's own prefill (its reset), so the target step
(verify_s / passes), c and the break-even fit were biased by prefill / passes. From here verify_s and draft_s hold
decode passes only. Old rows are converted: the target's prefill was recorded as ttft_s, so it moves out of
verify_s into prefill_s. The draft's prefill of old rows was never recorded apart: draft_prefill_s stays NULL
there (unknown, still inside draft_s).

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("prefill_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("draft_prefill_s", sa.Float(), nullable=True))
    op.execute("UPDATE requests SET prefill_s = ttft_s, verify_s = verify_s - ttft_s WHERE ttft_s IS NOT NULL")


def downgrade() -> None:
    op.execute("UPDATE requests SET verify_s = verify_s + prefill_s WHERE prefill_s IS NOT NULL")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("draft_prefill_s")
        batch.drop_column("prefill_s")
