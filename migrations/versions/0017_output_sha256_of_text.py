"""requests.output_sha256: the sha256 of the output text for every row

Engine rows used to hash their token ids and vLLM rows their text, so the same output had two fingerprints
depending on who decoded it. From here every row hashes its UTF-8 text; old engine rows are recomputed from the
output_text they stored.

Revision ID: 0017
Revises: 0016
"""

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_requests = sa.table(
    "requests", sa.column("id", sa.Integer), sa.column("output_text", sa.Text), sa.column("output_sha256", sa.String)
)


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.select(_requests.c.id, _requests.c.output_text).where(_requests.c.output_sha256 != "")).all()
    updates = [
        {"rid": rid, "sha": hashlib.sha256((text or "").encode("utf-8", "surrogatepass")).hexdigest()}
        for rid, text in rows
    ]
    if updates:
        conn.execute(
            _requests.update().where(_requests.c.id == sa.bindparam("rid")).values(output_sha256=sa.bindparam("sha")),
            updates,
        )


def downgrade() -> None:
    pass  # the token ids the old fingerprints hashed are not stored; the text fingerprints stay
