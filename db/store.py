"""The tracking store (mlflow style): one class, one session_scope, plain entities out.

``Store`` is the runs, the queue and the requests (here) together with the reads behind every page
(``db.queries``), the tracker's tags, notes and baselines (``db.tracker``) and distillation jobs
(``db.distills``): each a part over one ``StoreBase`` (``db.connect``), so every caller holds one object.
"""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from db import entities as E
from db.connect import (  # noqa: F401  (re-exported: callers name them from db.store)
    BUSY_TIMEOUT_MS,
    DEFAULT_DB,
    HEARTBEAT_S,
    RUN_STATUSES,
    STALE_AFTER_S,
    StoreBase,
    StoreError,
    _run,
    _stale,
    _tags,
    make_engine,
    operational_error,
    read_only_file,
    resolve_url,
    rowcount,
    safe_url,
    status_expr,
)
from db.distills import Distills
from db.models import BanditStep, Request, RequestPosition, Run, RunPrompt, ServeStep, WatchInterval, utcnow
from db.queries import Queries
from db.tracker import Tracker


class Store(Queries, Tracker, Distills, StoreBase):
    """Every read and write of the tracking store, as methods returning entities."""

    # runs -----------------------------------------------------------------
    def create_run(
        self, name: str, config: dict, target: str, draft: str | None, total: int, status: str = "running"
    ) -> E.RunInfo:
        with self.session_scope() as s:
            run = Run(
                name=name,
                status=status,
                config=config,
                target=target,
                draft=draft,
                progress_total=total,
                progress_done=0,
            )
            s.add(run)
            s.flush()
            return self._info(run)

    def add_runs(
        self,
        runs: list[tuple[str, dict, str, str | None, list[E.RequestRecord]]],
        intervals: list[list[E.WatchInterval]] | None = None,
    ) -> list[int]:
        """Finished runs with their requests, (name, config, target, draft, records) each, and each run's watch
        intervals where given, in one transaction: an import is stored whole or not at all (each record's run_id is
        set here)."""
        ids = []
        with self.session_scope() as s:
            for i, (name, config, target, draft, records) in enumerate(runs):
                run = Run(name=name, status="done", config=config, target=target, draft=draft)
                run.progress_total = run.progress_done = len(records)
                run.finished_at = utcnow()
                s.add(run)
                s.flush()
                for r in records:
                    r.run_id = run.id
                if records:
                    _insert_requests(s, records)
                for interval in (intervals or [])[i] if intervals and i < len(intervals) else []:
                    s.add(WatchInterval(run_id=run.id, **asdict(interval)))
                ids.append(run.id)
        return ids

    def get_run(self, run_id: int) -> E.RunInfo | None:
        """The run, its status as readers see it (status_expr)."""
        with self.session_scope() as s:
            row = s.execute(select(Run, status_expr()).where(Run.id == run_id)).first()
            return self._info(row[0], row[1], tags=_tags(s, [run_id]).get(run_id, [])) if row else None

    def list_runs(self, limit: int | None = None) -> list[E.RunInfo]:
        """The newest runs first: ``limit`` of them (a page's bounded read), or every one (None: what must judge
        them all, such as regressions, sweeps and reports; a default of 1,000 once left the oldest out silently)."""
        with self.session_scope() as s:
            query = select(Run, status_expr()).order_by(Run.id.desc())
            rows = s.execute(query if limit is None else query.limit(limit)).all()
            tags = _tags(s, [r[0].id for r in rows])
            return [self._info(r[0], r[1], tags=tags.get(r[0].id, [])) for r in rows]

    def set_status(self, run_id: int, status: str, error: str | None = None) -> None:
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        values: dict[str, object] = {"status": status}
        if error is not None:
            values["error"] = error[:4000]
        if status in ("done", "failed", "cancelled", "interrupted"):
            values["finished_at"] = utcnow()
        with self.session_scope() as s:
            s.execute(update(Run).where(Run.id == run_id).values(**values))

    def attach(self, run_id: int, worker_id: str) -> None:
        """A foreground process (bench, resume) owns a run: its id and heartbeat let others judge staleness."""
        with self.session_scope() as s:
            s.execute(update(Run).where(Run.id == run_id).values(worker_id=worker_id, heartbeat_at=utcnow()))

    def interrupt_if_running(self, run_id: int, reason: str) -> bool:
        """Mark a running run interrupted now (its worker is known to be gone)."""
        with self.session_scope() as s:
            res = s.execute(
                update(Run)
                .where(Run.id == run_id, Run.status == "running")
                .values(status="interrupted", finished_at=utcnow(), error=reason)
            )
            return rowcount(res) == 1

    # queue ------------------------------------------------------------------
    def claim_next(self, worker_id: str) -> E.RunInfo | None:
        """Atomically take the oldest queued run. PostgreSQL: SELECT ... FOR UPDATE SKIP
        LOCKED, so workers on many machines share one queue without waiting on each
        other. SQLite (one writer at a time): one UPDATE guarded by status."""
        if self.engine.dialect.name == "postgresql":
            return self._claim_skip_locked(worker_id)
        with self.session_scope() as s:
            oldest = select(Run.id).where(Run.status == "queued").order_by(Run.id).limit(1).scalar_subquery()
            res = s.execute(
                update(Run)
                .where(Run.id == oldest, Run.status == "queued")
                .values(status="running", worker_id=worker_id, heartbeat_at=utcnow(), cancel_requested=False)
            )
            if rowcount(res) != 1:
                return None
            run = s.scalars(
                select(Run)
                .where(Run.worker_id == worker_id, Run.status == "running")
                .order_by(Run.heartbeat_at.desc(), Run.id.desc())
                .limit(1)
            ).first()
            return self._info(run) if run else None

    def _claim_skip_locked(self, worker_id: str) -> E.RunInfo | None:
        with self.session_scope() as s:
            run = s.scalars(
                select(Run).where(Run.status == "queued").order_by(Run.id).limit(1).with_for_update(skip_locked=True)
            ).first()
            if run is None:
                return None
            run.status, run.worker_id, run.heartbeat_at, run.cancel_requested = "running", worker_id, utcnow(), False
            s.flush()
            return self._info(run)

    def heartbeat(self, run_id: int) -> None:
        with self.session_scope() as s:
            s.execute(update(Run).where(Run.id == run_id).values(heartbeat_at=utcnow()))

    def request_cancel(self, run_id: int) -> str | None:
        """Queued runs are cancelled at once; running ones at the next request boundary."""
        with self.session_scope() as s:
            run = s.get(Run, run_id)
            if run is None:
                return None
            if run.status == "queued":
                run.status, run.finished_at = "cancelled", utcnow()
            elif run.status == "running":
                run.cancel_requested = True
            return run.status

    def cancel_requested(self, run_id: int) -> bool:
        with self.session_scope() as s:
            return bool(s.scalar(select(Run.cancel_requested).where(Run.id == run_id)))

    def requeue(self, run_id: int) -> bool:
        """Put an interrupted, failed or cancelled run back in the queue to resume it."""
        with self.session_scope() as s:
            res = s.execute(
                update(Run)
                .where(Run.id == run_id, Run.status.in_(("interrupted", "failed", "cancelled")))
                .values(status="queued", error=None, finished_at=None, cancel_requested=False)
            )
            return rowcount(res) == 1

    def mark_stale(self, timeout_s: float = STALE_AFTER_S) -> list[int]:
        """Runs whose worker stopped beating for timeout_s become 'interrupted' (the worker's and
        resume's write; readers use status_expr instead)."""
        with self.session_scope() as s:
            ids = list(s.scalars(select(Run.id).where(_stale(timeout_s))))
            if ids:
                s.execute(
                    update(Run)
                    .where(Run.id.in_(ids), Run.status == "running")
                    .values(
                        status="interrupted",
                        finished_at=utcnow(),
                        error="worker stopped (no heartbeat); resume it to continue",
                    )
                )
            return ids

    def merge_config(self, run_id: int, values: dict) -> None:
        """Add keys known only once the run executes (device, dtype) to its stored config."""
        with self.session_scope() as s:
            run = s.get(Run, run_id)
            if run is not None:
                run.config = {**(run.config or {}), **values}

    # requests ---------------------------------------------------------------
    def add_requests(self, records: list[E.RequestRecord], progress: tuple[int, int] | None = None) -> list[int]:
        """Insert requests with their positions and bandit steps, and with ``progress`` = (run id,
        requests done) the run's progress too, all in one transaction: a batch is either wholly
        written with its progress or not at all, so retrying a failed batch never duplicates."""
        if not records:
            return []
        with self.session_scope() as s:
            ids = _insert_requests(s, records)
            if progress is not None:
                _progress(s, *progress)
        return ids

    def requests(self, run_id: int, include_warmup: bool = False) -> list[E.RequestRecord]:
        with self.session_scope() as s:
            q = select(Request).where(Request.run_id == run_id)
            if not include_warmup:
                q = q.where(Request.warmup.is_(False))
            rows = s.scalars(q.order_by(Request.seq)).all()
            positions = _positions_by_request(s, [r.id for r in rows])
            return [_request(r, positions.get(r.id, [])) for r in rows]

    def add_interval(self, run_id: int, interval: E.WatchInterval) -> None:
        """One `engines watch` interval and the run's progress (intervals so far), in one transaction."""
        with self.session_scope() as s:
            s.add(WatchInterval(run_id=run_id, **asdict(interval)))
            s.flush()
            _progress(s, run_id, interval.seq + 1)

    def add_serve_steps(self, run_id: int, steps: list[E.StepRecord]) -> None:
        """Steps of Phoenix's server loop, in one transaction (the recorder writes them as they come)."""
        if steps:
            with self.session_scope() as s:
                s.execute(insert(ServeStep), [{"run_id": run_id, **asdict(step)} for step in steps])

    def serve_steps(self, run_id: int, limit: int | None = None) -> list[E.StepRecord]:
        """A served run's steps in order; with ``limit``, the latest ones."""
        with self.session_scope() as s:
            q = select(ServeStep).where(ServeStep.run_id == run_id).order_by(ServeStep.step.desc())
            rows = list(s.scalars(q.limit(limit) if limit else q))[::-1]
            fields = E.StepRecord.__dataclass_fields__
            return [E.StepRecord(**{f: getattr(r, f) for f in fields}) for r in rows]

    def prompt_text(self, run_id: int, prompt_id: str) -> str | None:
        """The text a run sent for a prompt; None for runs recorded before 0022 kept it."""
        with self.session_scope() as s:
            return s.scalar(select(RunPrompt.text).where(RunPrompt.run_id == run_id, RunPrompt.prompt_id == prompt_id))

    def intervals(self, run_id: int) -> list[E.WatchInterval]:
        with self.session_scope() as s:
            rows = s.scalars(select(WatchInterval).where(WatchInterval.run_id == run_id).order_by(WatchInterval.seq))
            return [
                E.WatchInterval(
                    r.seq, r.seconds, r.drafts, r.draft_tokens, r.accepted, r.generation_tokens, list(r.per_position)
                )
                for r in rows
            ]

    def request_seqs(self, run_id: int) -> set[int]:
        """The seq of every request the run holds (a spill's replay skips those already written)."""
        with self.session_scope() as s:
            return set(s.scalars(select(Request.seq).where(Request.run_id == run_id)))

    def count_requests(self, run_id: int) -> int:  # the kept rows: delete confirms with it, tests count with it
        with self.session_scope() as s:
            return s.scalar(select(func.count()).select_from(Request).where(Request.run_id == run_id)) or 0

    def queued_count(self) -> int:
        with self.session_scope() as s:
            return s.scalar(select(func.count()).select_from(Run).where(Run.status == "queued")) or 0

    def bandit_steps(self, run_id: int) -> list[tuple[int, E.BanditRecord]]:
        """(request seq, step) for every bandit decision of a run, in order."""
        with self.session_scope() as s:
            rows = s.execute(
                select(Request.seq, BanditStep)
                .join(BanditStep, BanditStep.request_id == Request.id)
                .where(Request.run_id == run_id)
                .order_by(Request.seq)
            ).all()
            return [(seq, _bandit(b)) for seq, b in rows]


def _insert_requests(s: Session, records: list[E.RequestRecord]) -> list[int]:
    """Bulk INSERT ... RETURNING, so the ids come back in parameter order."""
    skip = ("positions", "bandit", "id", "created_at", "prompt_text")
    now = utcnow()
    rows = [{**{k: v for k, v in vars(r).items() if k not in skip}, "created_at": r.created_at or now} for r in records]
    ids = list(s.scalars(insert(Request).returning(Request.id, sort_by_parameter_order=True), rows))
    positions = [
        {
            "request_id": rid,
            "position": p.position,
            "proposed": p.proposed,
            "accepted": p.accepted,
            "reached": p.reached,
        }
        for rid, rec in zip(ids, records)
        for p in rec.positions
    ]
    if positions:
        s.execute(insert(RequestPosition), positions)
    steps = [{"request_id": rid, **vars(rec.bandit)} for rid, rec in zip(ids, records) if rec.bandit is not None]
    if steps:
        s.execute(insert(BanditStep), steps)
    _insert_prompts(s, records)
    return ids


def _insert_prompts(s: Session, records: list[E.RequestRecord]) -> None:
    """Each prompt's text once per run: the first record of a (run, prompt) that carries it."""
    texts = {(r.run_id, r.prompt_id): r.prompt_text for r in records if r.prompt_text is not None}
    for run_id in {run for run, _ in texts}:
        have = set(s.scalars(select(RunPrompt.prompt_id).where(RunPrompt.run_id == run_id)))
        new = [
            {"run_id": run, "prompt_id": pid, "text": text}
            for (run, pid), text in texts.items()
            if run == run_id and pid not in have
        ]
        if new:
            s.execute(insert(RunPrompt), new)


def _progress(s: Session, run_id: int, done: int) -> None:
    s.execute(update(Run).where(Run.id == run_id).values(progress_done=done, heartbeat_at=utcnow()))


def _positions_by_request(s: Session, ids: list[int]) -> dict[int, list[E.PositionCount]]:
    out: dict[int, list[E.PositionCount]] = {}
    for chunk in range(0, len(ids), 500):
        part = ids[chunk : chunk + 500]
        rows = s.scalars(
            select(RequestPosition).where(RequestPosition.request_id.in_(part)).order_by(RequestPosition.position)
        ).all()
        for p in rows:
            out.setdefault(p.request_id, []).append(E.PositionCount(p.position, p.proposed, p.accepted, p.reached))
    return out


def _request(r: Request, positions: list[E.PositionCount]) -> E.RequestRecord:
    cols = {
        c: getattr(r, c)
        for c in E.RequestRecord.__dataclass_fields__
        if c not in ("positions", "bandit", "prompt_text")
    }
    return E.RequestRecord(**cols, positions=positions)


def _bandit(b: BanditStep) -> E.BanditRecord:
    return E.BanditRecord(
        t=b.t,
        explored=b.explored,
        chosen_k=b.chosen_k,
        arm_means=dict(b.arm_means),
        arm_counts=dict(b.arm_counts),
        reward=b.reward,
        epsilon=b.epsilon,
        p_not_best=b.p_not_best,
        policy=b.policy or "epsilon_greedy",
        fallback=bool(b.fallback),
        arm=b.arm,
    )
