"""The aggregate reads about runs and their modes: the Runs list, the results table, speedups' inputs, identity.
The per-request and per-position series the charts draw are in db.series.
Every filter is a bound parameter; aggregation happens in SQL so a page's cost does not
grow with the run."""

from __future__ import annotations

import pandas as pd
from sqlalchemy import Integer, and_, case, cast, func, select

from db import entities as E
from db.connect import STALE_AFTER_S, status_expr
from db.models import Request, RequestPosition, Run, RunTag
from db.series import Series

RUN_SORTS = {"id": Run.id, "name": Run.name, "status": Run.status, "target": Run.target, "created_at": Run.created_at}


def _run_filters(f: E.RunFilter) -> list:
    shown = status_expr(STALE_AFTER_S if f.stale_after_s is None else f.stale_after_s)
    name, model, status, tag = f.name, f.model, f.status, f.tag
    cond = []
    if name:
        cond.append(Run.name.contains(name, autoescape=True))
    if model:
        cond.append(Run.target.contains(model, autoescape=True) | Run.draft.contains(model, autoescape=True))
    if status:
        cond.append(shown == status)
    if tag:
        cond.append(Run.id.in_(select(RunTag.run_id).where(RunTag.tag == tag)))
    if not f.archived:
        cond.append(Run.archived.is_(False))
    return cond


class Queries(Series):
    """Reads about runs and their modes; they build on the series (a mode's summary sums its arms)."""

    def runs_frame(
        self,
        where: E.RunFilter = E.RunFilter(),
        limit: int | None = None,
        offset: int = 0,
        sort: str = "id",
        descending: bool = True,
    ) -> pd.DataFrame:
        """One page of runs, filtered, sorted and paged in SQL; tags joined in as one comma-separated string."""
        shown = status_expr(STALE_AFTER_S if where.stale_after_s is None else where.stale_after_s)
        tags = (
            select(func.aggregate_strings(RunTag.tag, ","))
            .where(RunTag.run_id == Run.id)
            .correlate(Run)
            .scalar_subquery()
        )
        key = RUN_SORTS.get(sort, Run.id)
        q = (
            select(
                Run.id,
                Run.name,
                shown.label("status"),
                Run.target,
                Run.draft,
                Run.created_at,
                Run.finished_at,
                Run.progress_done,
                Run.progress_total,
                Run.error,
                Run.config,
                Run.archived,
                tags.label("tags"),
            )
            .where(*_run_filters(where))
            .order_by(key.desc() if descending else key.asc(), Run.id.desc())
            .offset(offset)
        )
        return self._frame(q.limit(limit) if limit else q)

    def runs_count(self, where: E.RunFilter = E.RunFilter()) -> int:
        q = select(func.count()).select_from(Run).where(*_run_filters(where))
        with self.session_scope() as s:
            return s.scalar(q) or 0

    def run_mode_rates(self, run_ids: list[int]) -> pd.DataFrame:
        """Per (run, mode): requests, prompts, and tokens/s (the mean of per-request tokens/s, Phoenix's one
        definition)."""
        r = Request
        q = (
            select(
                r.run_id,
                r.mode,
                func.count().label("n"),
                func.count(func.distinct(r.prompt_id)).label("prompts"),
                func.avg(r.tokens_per_s).label("tokens_per_s"),
            )
            .where(r.run_id.in_(run_ids), r.warmup.is_(False))
            .group_by(r.run_id, r.mode)
        )
        return self._frame(q)

    def identity(self, run_id: int) -> tuple[int, int, pd.DataFrame]:
        """(identical, checked, mismatches) for a run; mismatches carry their diverging position. The target-only
        rows are the reference itself, identical by definition: they are not counted as checked."""
        r = Request
        with self.session_scope() as s:
            same, checked = s.execute(
                select(
                    func.coalesce(func.sum(cast(case((r.identical.is_(True), 1), else_=0), Integer)), 0),
                    func.count(r.identical),
                ).where(r.run_id == run_id, r.warmup.is_(False), r.mode != "target")
            ).one()
        bad = self._frame(
            select(r.id, r.seq, r.mode, r.k, r.prompt_id, r.diverged_at, r.trace_id)
            .where(r.run_id == run_id, r.warmup.is_(False), r.identical.is_(False))
            .order_by(r.seq)
            .limit(200),
        )
        return int(same), int(checked), bad

    def requests_frame(
        self,
        run_id: int,
        mode: str = "",
        k: int | None = None,
        identical: str = "",
        prompt: str = "",
        limit: int = 500,
    ) -> pd.DataFrame:
        r = Request
        cond = [r.run_id == run_id, r.warmup.is_(False)]
        if mode:
            cond.append(r.mode == mode)
        if k is not None:
            cond.append(r.k == k)
        if identical in ("yes", "no"):
            cond.append(r.identical.is_(identical == "yes"))
        elif identical == "unchecked":
            cond.append(r.identical.is_(None))
        if prompt:
            cond.append(r.prompt_id.contains(prompt, autoescape=True) | r.output_text.contains(prompt, autoescape=True))
        q = (
            select(
                r.id,
                r.seq,
                r.mode,
                r.k,
                r.drafter,
                r.prompt_id,
                r.turn,
                r.category,
                r.output_tokens,
                r.latency_s,
                r.ttft_s,
                r.tokens_per_s,
                r.proposed,
                r.accepted,
                r.passes,
                r.draft_s,
                r.verify_s,
                r.identical,
                r.diverged_at,
                r.trace_id,
                r.error,
            )
            .where(and_(*cond))
            .order_by(r.seq)
            .limit(limit)
        )
        return self._frame(q)

    def request_detail(self, request_id: int) -> tuple[dict | None, pd.DataFrame]:
        r, p = Request, RequestPosition
        with self.session_scope() as s:
            row = s.execute(select(r).where(r.id == request_id)).scalar_one_or_none()
            info = None if row is None else {c.name: getattr(row, c.name) for c in r.__table__.columns}
        pos = self._frame(
            select(p.position, p.proposed, p.accepted).where(p.request_id == request_id).order_by(p.position)
        )
        return info, pos

    def rewards(self, run_id: int, modes: list[str]) -> pd.DataFrame:
        r = Request
        q = (
            select(r.run_id, r.mode, r.prompt_id, r.category, r.tokens_per_s, r.latency_s, r.accepted, r.proposed)
            .where(r.run_id == run_id, r.mode.in_(modes), r.warmup.is_(False), r.error.is_(None))
            .order_by(r.seq)
        )
        return self._frame(q)  # answered requests only: a failed one's 0 tokens/s is no sample of a speed

    def mode_summaries(self, run_id: int, totals: pd.DataFrame | None = None) -> list[E.ModeSummary]:
        """Phoenix's results table for a run, from the (mode, k) sums and SQL percentiles."""
        totals = self.arm_totals(run_id) if totals is None else totals
        if totals.empty:
            return []
        per_mode = totals.groupby("mode", sort=False).sum(numeric_only=True).sort_values("first_seq")
        per_mode_failed = totals.groupby("mode", sort=False)["failed"].max()  # per mode already: not summed over k
        pct = self.latency_percentiles(run_id, {m: int(n) for m, n in per_mode["n"].items()}, (50, 95))
        out = []
        for mode, t in per_mode.iterrows():
            n = int(t["n"])
            out.append(
                E.ModeSummary(
                    mode,
                    n,
                    float(t["latency_s"]) / n,
                    pct[mode][50],
                    pct[mode][95],
                    float(t["tokens_per_s_sum"]) / n,
                    int(t["proposed"]),
                    int(t["accepted"]),
                    float(t["draft_s"]),
                    float(t["verify_s"]),
                    int(t["identical"]),
                    int(t["checked"]),
                    passes=int(t["passes"]),
                    output_tokens=int(t["output_tokens"]),
                    drafts=int(t["drafts"]),
                    failed=int(per_mode_failed.get(mode, 0)),
                )
            )
        return out

    def warmup_count(self, run_id: int) -> int:
        """Warm-up requests of a run: stored, and left out of every figure."""
        r = Request
        with self.session_scope() as s:
            return int(s.scalar(select(func.count()).select_from(r).where(r.run_id == run_id, r.warmup.is_(True))) or 0)

    def category_requests(self, run_id: int) -> pd.DataFrame:
        """What a per-category report needs of every non-warm-up request: prompt, mode, category, turn, reward,
        passes and accepted drafts."""
        r = Request
        return self._frame(
            select(
                r.prompt_id, r.mode, r.category, r.turn, r.drafter, r.tokens_per_s, r.passes, r.accepted, r.proposed
            ).where(r.run_id == run_id, r.warmup.is_(False), r.error.is_(None)),
        )

    def prompt_rewards(self, run_id: int) -> pd.DataFrame:
        """prompt_id, category, mode, k and tokens_per_s of every answered non-warm-up request: what speedups are
        built from (category: a Spec-Bench column's share of them)."""
        r = Request
        q = select(r.prompt_id, r.category, r.mode, r.k, r.tokens_per_s).where(
            r.run_id == run_id, r.warmup.is_(False), r.error.is_(None)
        )
        return self._frame(q)

    def same_target_runs(self, run_id: int, target: str, limit: int = 10) -> list[int]:
        """The newest other runs of the same target that answered target-only requests: where a run's target-only
        can be checked against the same work measured another time."""
        r = Request
        q = (
            select(Run.id)
            .where(Run.target == target, Run.id != run_id)
            .where(select(r.id).where(r.run_id == Run.id, r.mode == "target", r.warmup.is_(False)).exists())
            .order_by(Run.id.desc())
            .limit(limit)
        )
        with self.session_scope() as s:
            return list(s.scalars(q))

    def prompt_rewards_of_runs(self, run_ids: list[int]) -> pd.DataFrame:
        """The same rows for several runs, with run_id: the Runs list's best speedup of each."""
        r = Request
        q = select(r.run_id, r.prompt_id, r.mode, r.tokens_per_s).where(
            r.run_id.in_(run_ids), r.warmup.is_(False), r.error.is_(None)
        )
        return self._frame(q)
