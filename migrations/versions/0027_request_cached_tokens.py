"""requests.cached_tokens: the prompt tokens a served request took from the prefix cache

Phoenix's server reuses the KV of prompt prefixes it has seen (OpenAI's usage.prompt_tokens_details.cached_tokens);
the dashboard shows a served run's hit rate and the time to first token it saved. NULL for rows before this one
and for requests no prefix cache served (bench runs, other engines).

Revision ID: 0027
Revises: 0026
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("cached_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("cached_tokens")
