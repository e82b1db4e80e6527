"""watch_intervals: `engines watch` intervals in their own table

A watch interval is a live server's counter deltas over some seconds, not a request: it was stored as a fake
request (prompt_id interval-N, mode <engine>_watch) with its per-position counts, which every request figure then
counted. Those rows move here, per-position accepted counts in order, and leave requests.

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_requests = sa.table(
    "requests",
    sa.column("id", sa.Integer),
    sa.column("run_id", sa.Integer),
    sa.column("seq", sa.Integer),
    sa.column("mode", sa.String),
    sa.column("prompt_id", sa.String),
    sa.column("latency_s", sa.Float),
    sa.column("passes", sa.Integer),
    sa.column("proposed", sa.Integer),
    sa.column("accepted", sa.Integer),
    sa.column("output_tokens", sa.Integer),
)
_positions = sa.table(
    "request_positions",
    sa.column("request_id", sa.Integer),
    sa.column("position", sa.Integer),
    sa.column("accepted", sa.Integer),
)


def upgrade() -> None:
    intervals = op.create_table(
        "watch_intervals",
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("drafts", sa.Integer(), nullable=False),
        sa.Column("draft_tokens", sa.Integer(), nullable=False),
        sa.Column("accepted", sa.Integer(), nullable=False),
        sa.Column("generation_tokens", sa.Integer(), nullable=False),
        sa.Column("per_position", sa.JSON(), nullable=False),
    )
    conn = op.get_bind()
    r = _requests.c
    rows = conn.execute(
        sa.select(r.id, r.run_id, r.seq, r.latency_s, r.passes, r.proposed, r.accepted, r.output_tokens).where(
            r.mode.like("%\\_watch", escape="\\"), r.prompt_id.like("interval-%")
        )
    ).all()
    for rid, run_id, seq, seconds, passes, proposed, accepted, output_tokens in rows:
        per_pos = conn.execute(
            sa.select(_positions.c.accepted).where(_positions.c.request_id == rid).order_by(_positions.c.position)
        ).scalars()
        conn.execute(
            intervals.insert().values(
                run_id=run_id,
                seq=seq,
                seconds=seconds or 0.0,
                drafts=passes or 0,
                draft_tokens=proposed or 0,
                accepted=accepted or 0,
                generation_tokens=output_tokens or 0,
                per_position=list(per_pos),
            )
        )
    ids = [row[0] for row in rows]
    for chunk in range(0, len(ids), 500):  # bound parameters per statement stay well under SQLite's limit
        part = ids[chunk : chunk + 500]
        conn.execute(_positions.delete().where(_positions.c.request_id.in_(part)))
        conn.execute(
            sa.table("bandit_steps", sa.column("request_id")).delete().where(sa.column("request_id").in_(part))
        )
        conn.execute(_requests.delete().where(r.id.in_(part)))


def downgrade() -> None:
    n = op.get_bind().execute(sa.text("SELECT count(*) FROM watch_intervals")).scalar() or 0
    if n:  # nothing recorded is dropped by a schema step
        raise RuntimeError(f"watch_intervals holds {n} intervals that 0020 has no place for; export those runs first")
    op.drop_table("watch_intervals")
