"""Every mode names its drafter: fixed_<k> becomes <drafter>_<k> (model_<k> for the draft model)

fixed_<k> took its drafter from the run's --drafter, so the same mode text meant the draft model in one run and
the EAGLE-3 head in the next. Each run's rows are renamed after its own --drafter (the stored bench config;
"model" where a run predates the flag): requests.mode, bandit_steps.arm and the arm keys of its running
estimates, and the run config's modes and drafter arms. A run without a bench config (a served run) has no
fixed_<k> rows. Downgrade names them fixed_<k> again.

Revision ID: 0020
Revises: 0019
"""

import re

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

FIXED = re.compile(r"^fixed_(\d+)$")
_runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("config", sa.JSON))
_requests = sa.table("requests", sa.column("id", sa.Integer), sa.column("run_id", sa.Integer), sa.column("mode"))
_steps = sa.table(
    "bandit_steps",
    sa.column("request_id", sa.Integer),
    sa.column("arm", sa.String),
    sa.column("arm_means", sa.JSON),
    sa.column("arm_counts", sa.JSON),
)


def _renamer(drafter: str, forward: bool):
    def rename(text):
        if not isinstance(text, str):
            return text
        if forward:
            m = FIXED.match(text)
            return f"{drafter}_{m[1]}" if m else text
        m = re.match(rf"^{re.escape(drafter)}_(\d+)$", text)
        return f"fixed_{m[1]}" if m else text

    return rename


def _convert(forward: bool) -> None:
    conn = op.get_bind()
    for run_id, config in conn.execute(sa.select(_runs.c.id, _runs.c.config)).all():
        bench = (config or {}).get("bench") if isinstance(config, dict) else None
        if not isinstance(bench, dict):
            continue
        drafter = str(bench.get("drafter") or "model")
        rename = _renamer(drafter, forward)
        new_bench = dict(bench)
        for key in ("modes", "drafter_arms"):
            if isinstance(bench.get(key), list):
                new_bench[key] = [rename(m) for m in bench[key]]
        if new_bench != bench:
            conn.execute(_runs.update().where(_runs.c.id == run_id).values(config={**config, "bench": new_bench}))
        modes = conn.execute(sa.select(_requests.c.mode).where(_requests.c.run_id == run_id).distinct()).scalars()
        for mode in list(modes):
            if rename(mode) != mode:
                conn.execute(
                    _requests.update()
                    .where(_requests.c.run_id == run_id, _requests.c.mode == mode)
                    .values(mode=rename(mode))
                )
        ids = sa.select(_requests.c.id).where(_requests.c.run_id == run_id).scalar_subquery()
        steps = conn.execute(
            sa.select(_steps.c.request_id, _steps.c.arm, _steps.c.arm_means, _steps.c.arm_counts).where(
                _steps.c.request_id.in_(ids)
            )
        ).all()
        for request_id, arm, means, counts in steps:
            values = {
                "arm": rename(arm),
                "arm_means": {rename(k): v for k, v in (means or {}).items()},
                "arm_counts": {rename(k): v for k, v in (counts or {}).items()},
            }
            if values != {"arm": arm, "arm_means": means or {}, "arm_counts": counts or {}}:
                conn.execute(_steps.update().where(_steps.c.request_id == request_id).values(**values))


def upgrade() -> None:
    _convert(forward=True)


def downgrade() -> None:
    _convert(forward=False)
