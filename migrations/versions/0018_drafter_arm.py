"""requests.drafter and bandit_steps.arm: a policy may choose the drafter as well as k

A request records what drafted it (none, model, ngram, suffix, eagle3), so a drafter-choosing bandit's rows say
which arm each request took; its bandit step keeps the arm's label (a mode such as ngram_4). Old rows stay NULL:
their drafter is the run's --drafter, or none for k=0.

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("drafter", sa.String(20), nullable=True))
    with op.batch_alter_table("bandit_steps") as batch:
        batch.add_column(sa.Column("arm", sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("bandit_steps") as batch:
        batch.drop_column("arm")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("drafter")
