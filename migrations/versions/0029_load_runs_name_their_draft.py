"""A load run's spec names the draft model or head its server drafted with

A load run stored its RunSpec with no draft: Phoenix's /health did not say which draft or head it loaded, and the
spec left vLLM's speculative config and llama.cpp's -md out, so two heads on one target would share one series.
Now /health says (``draft``) and the spec reads each engine's own record. Older runs are filled in from what they
kept: a Phoenix load run takes its server's draft from the server run it links (``config.server.run_id``), and
every stored spec of a load run whose drafter runs a draft gets the draft the same rule derives for a new run
(``engine.runspec``), so stored and derived specs of one setting stay one series. Downgrade clears those drafts.

Revision ID: 0029
Revises: 0028
"""

from types import SimpleNamespace

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

_runs = sa.table(
    "runs",
    sa.column("id", sa.Integer),
    sa.column("name", sa.String),
    sa.column("config", sa.JSON),
    sa.column("target", sa.String),
    sa.column("draft", sa.String),
)


def _load_runs(conn):
    rows = conn.execute(sa.select(_runs.c.id, _runs.c.name, _runs.c.config, _runs.c.target, _runs.c.draft)).all()
    return [r for r in rows if isinstance(r.config, dict) and isinstance(r.config.get("load"), dict)]


def upgrade() -> None:
    from engine import runspec  # the one rule that derives a spec: a stored spec must match what it derives

    conn = op.get_bind()
    drafts = dict(conn.execute(sa.select(_runs.c.id, _runs.c.draft)).all())
    for r in _load_runs(conn):
        config = dict(r.config)
        server = config.get("server")
        if isinstance(server, dict) and "draft" not in server and drafts.get(server.get("run_id")):
            config["server"] = {**server, "draft": drafts[server["run_id"]]}
        stored = config.get("run_spec")
        if isinstance(stored, dict):
            derived = {k: v for k, v in config.items() if k != "run_spec"}
            run = SimpleNamespace(id=r.id, name=r.name, config=derived, target=r.target, draft=r.draft, bench=None)
            config["run_spec"] = {
                mode: {**spec, "draft": runspec.of(run, mode).as_dict()["draft"]} if isinstance(spec, dict) else spec
                for mode, spec in stored.items()
            }
        if config != r.config:
            conn.execute(_runs.update().where(_runs.c.id == r.id).values(config=config))


def downgrade() -> None:
    conn = op.get_bind()
    for r in _load_runs(conn):
        stored = r.config.get("run_spec")
        if isinstance(stored, dict):
            cleared = {m: {**s, "draft": None} if isinstance(s, dict) else s for m, s in stored.items()}
            conn.execute(_runs.update().where(_runs.c.id == r.id).values(config={**r.config, "run_spec": cleared}))
