"""run_prompts: each prompt's text, once per run

The Requests page used to read a request's prompt from its prompt file at render time, which shows nothing (or
another text) once the file moves or changes. A run now stores every prompt it sent, once. Older runs have no
rows here, and the page says so.

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_prompts",
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("prompt_id", sa.String(200), primary_key=True),
        sa.Column("text", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_prompts")
