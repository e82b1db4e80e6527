"""serve_steps.prefill_tokens: the prompt tokens a step prefilled beside its verification pass

The server's loop schedules by tokens: each step verifies the running rows, then prefills waiting prompts in
chunks with what is left of its budget. 0 for older rows, whose prefills ran whole between steps.

Revision ID: 0026
Revises: 0025
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("serve_steps") as batch:
        batch.add_column(sa.Column("prefill_tokens", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("serve_steps") as batch:
        batch.drop_column("prefill_tokens")
