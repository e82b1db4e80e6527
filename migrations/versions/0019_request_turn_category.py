"""requests.turn and requests.category: multi-turn prompts and per-category reports

A multi-turn question (Spec-Bench's MT-bench part) is one request per turn; the turn number and the prompt's
category are kept with the request so identity, per-position counts and speedups can be read per turn and per
category. NULL for one-turn prompt sets and older rows.

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("turn", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("category", sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("category")
        batch.drop_column("turn")
