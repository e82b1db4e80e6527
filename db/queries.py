"""Every aggregate read: the results table, the dashboard's frames, the benchmarks' figures.
Every filter is a bound parameter; aggregation happens in SQL so a page's cost does not
grow with the run."""
from __future__ import annotations

import math

import pandas as pd
from sqlalchemy import Integer, and_, case, cast, func, or_, select

from db import entities as E
from db.models import BanditStep, Request, RequestPosition, Run
from db.store import STALE_AFTER_S, Store, status_expr

PLOT_ROWS_PER_MODE = 4000  # request-level charts sample this many rows per mode
BANDIT_POINTS = 2000  # the bandit history is drawn from at most this many windows per mode


def _frame(store: Store, stmt) -> pd.DataFrame:
    with store.session_scope() as s:
        result = s.execute(stmt)
        return pd.DataFrame(result.all(), columns=list(result.keys()))


def runs_frame(store: Store, name: str = "", model: str = "", status: str = "",
               stale_after_s: float = STALE_AFTER_S) -> pd.DataFrame:
    shown = status_expr(stale_after_s)
    q = select(Run.id, Run.name, shown.label("status"), Run.target, Run.draft, Run.created_at, Run.finished_at,
               Run.progress_done, Run.progress_total, Run.error, Run.config).order_by(Run.id.desc())
    if name:
        q = q.where(Run.name.contains(name, autoescape=True))
    if model:
        q = q.where(Run.target.contains(model, autoescape=True) | Run.draft.contains(model, autoescape=True))
    if status:
        q = q.where(shown == status)
    return _frame(store, q)


def run_mode_rates(store: Store, run_ids: list[int]) -> pd.DataFrame:
    """Per (run, mode): requests, prompts, output tokens / latency seconds."""
    r = Request
    q = (select(r.run_id, r.mode, func.count().label("n"), func.count(func.distinct(r.prompt_id)).label("prompts"),
                (func.sum(r.output_tokens) / func.sum(r.latency_s)).label("tokens_per_s"))
         .where(r.run_id.in_(run_ids), r.warmup.is_(False)).group_by(r.run_id, r.mode))
    return _frame(store, q)


def request_sample(store: Store, run_id: int, per_mode: int = PLOT_ROWS_PER_MODE) -> pd.DataFrame:
    """Request-level rows for strip and distribution charts, the first N per mode."""
    r = Request
    ranked = (select(r.id, r.seq, r.mode, r.k, r.latency_s, r.tokens_per_s, r.draft_s, r.verify_s, r.trace_id,
                     r.prompt_id, r.accepted, r.proposed,
                     func.row_number().over(partition_by=r.mode, order_by=r.seq).label("rn"))
              .where(r.run_id == run_id, r.warmup.is_(False)).subquery())
    return _frame(store, select(ranked).where(ranked.c.rn <= per_mode).order_by(ranked.c.seq))


def time_split(store: Store, run_id: int) -> pd.DataFrame:
    r = Request
    q = (select(r.mode, r.k, func.count().label("n"), func.sum(r.draft_s).label("draft_s"),
                func.sum(r.verify_s).label("verify_s"), func.sum(r.latency_s).label("latency_s"),
                func.sum(r.passes).label("passes"), func.sum(r.proposed).label("proposed"),
                func.sum(r.output_tokens).label("output_tokens"))
         .where(r.run_id == run_id, r.warmup.is_(False)).group_by(r.mode, r.k).order_by(r.mode, r.k))
    return _frame(store, q)


def positions(store: Store, run_id: int) -> pd.DataFrame:
    r, p = Request, RequestPosition
    q = (select(r.mode, r.k, p.position, func.sum(p.proposed).label("proposed"), func.sum(p.accepted).label("accepted"))
         .join(p, p.request_id == r.id).where(r.run_id == run_id, r.warmup.is_(False))
         .group_by(r.mode, r.k, p.position).order_by(r.mode, r.k, p.position))
    return _frame(store, q)


def bandit_history(store: Store, run_id: int, points: int = BANDIT_POINTS) -> dict[str, pd.DataFrame]:
    """The bandit over time, aggregated in SQL into at most ``points`` windows of decisions per mode,
    so a long run costs the page the same as a short one. A window of one decision keeps its trace id.

    Returns 'choices' (mode, t, win, chosen_k, n, explored_n, trace_id: per window and chosen arm),
    'signals' (mode, t, win, n, epsilon, p_not_best, reward: window means) and 'means' (mode, t,
    arm_means, arm_counts: the policy's estimates after each window's last decision)."""
    b, r = BanditStep, Request
    steps = (select(r.mode, b.t, b.chosen_k, b.explored, b.epsilon, b.p_not_best, b.reward, b.arm_means, b.arm_counts,
                    r.trace_id, func.count().over(partition_by=r.mode).label("total"))
             .join(r, r.id == b.request_id).where(r.run_id == run_id).subquery())
    larger = func.max if store.engine.dialect.name == "sqlite" else func.greatest  # SQLite's scalar max
    width = larger(1, func.ceil(steps.c.total / float(points)))
    windowed = select(steps, cast(func.floor(steps.c.t / width), Integer).label("win")).subquery()
    w = windowed.c
    explored = func.sum(cast(case((w.explored.is_(True), 1), else_=0), Integer))
    choices = _frame(store, select(w.mode, func.min(w.t).label("t"), w.win, w.chosen_k, func.count().label("n"),
                                   explored.label("explored_n"), func.max(w.trace_id).label("trace_id"))
                     .group_by(w.mode, w.win, w.chosen_k).order_by(w.mode, w.win, w.chosen_k))
    signals = _frame(store, select(w.mode, func.min(w.t).label("t"), w.win, func.count().label("n"),
                                   func.avg(w.epsilon).label("epsilon"), func.avg(w.p_not_best).label("p_not_best"),
                                   func.avg(w.reward).label("reward"))
                     .group_by(w.mode, w.win).order_by(w.mode, w.win))
    last = select(w.mode, w.win, func.max(w.t).label("t")).group_by(w.mode, w.win).subquery()
    means = _frame(store, select(w.mode, w.t, w.arm_means, w.arm_counts)
                   .join(last, and_(last.c.mode == w.mode, last.c.t == w.t)).order_by(w.mode, w.t))
    return {"choices": choices, "signals": signals, "means": means}


def policy_frame(store: Store, run_id: int) -> pd.DataFrame:
    """Every non-warm-up request of a run with its bandit step, if any (fixed modes have none)."""
    b, r = BanditStep, Request
    q = (select(r.seq, r.mode, r.k, r.prompt_id, r.tokens_per_s, r.trace_id, b.t, b.explored, b.fallback, b.policy)
         .outerjoin(b, b.request_id == r.id).where(r.run_id == run_id, r.warmup.is_(False)).order_by(r.seq))
    df = _frame(store, q)
    df["explored"] = df["explored"].fillna(False).astype(bool)
    df["fallback"] = df["fallback"].fillna(False).astype(bool)
    return df


def identity(store: Store, run_id: int) -> tuple[int, int, pd.DataFrame]:
    """(identical, checked, mismatches) for a run; mismatches carry their diverging position."""
    r = Request
    with store.session_scope() as s:
        same, checked = s.execute(
            select(func.coalesce(func.sum(cast(case((r.identical.is_(True), 1), else_=0), Integer)), 0), func.count(r.identical))
            .where(r.run_id == run_id, r.warmup.is_(False))
        ).one()
    bad = _frame(store, select(r.id, r.seq, r.mode, r.k, r.prompt_id, r.diverged_at, r.trace_id)
                 .where(r.run_id == run_id, r.warmup.is_(False), r.identical.is_(False)).order_by(r.seq).limit(200))
    return int(same), int(checked), bad


def requests_frame(store: Store, run_id: int, mode: str = "", k: int | None = None, identical: str = "",
                   prompt: str = "", limit: int = 500) -> pd.DataFrame:
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
    q = (select(r.id, r.seq, r.mode, r.k, r.prompt_id, r.output_tokens, r.latency_s, r.ttft_s, r.tokens_per_s,
                r.proposed, r.accepted, r.passes, r.draft_s, r.verify_s, r.identical, r.diverged_at, r.trace_id)
         .where(and_(*cond)).order_by(r.seq).limit(limit))
    return _frame(store, q)


def request_detail(store: Store, request_id: int) -> tuple[dict | None, pd.DataFrame]:
    r, p = Request, RequestPosition
    with store.session_scope() as s:
        row = s.execute(select(r).where(r.id == request_id)).scalar_one_or_none()
        info = None if row is None else {c.name: getattr(row, c.name) for c in r.__table__.columns}
    pos = _frame(store, select(p.position, p.proposed, p.accepted).where(p.request_id == request_id).order_by(p.position))
    return info, pos


def rewards(store: Store, run_id: int, modes: list[str]) -> pd.DataFrame:
    r = Request
    q = (select(r.run_id, r.mode, r.tokens_per_s, r.latency_s)
         .where(r.run_id == run_id, r.mode.in_(modes), r.warmup.is_(False)).order_by(r.seq))
    return _frame(store, q)


def _identical_count(r=Request):
    return func.sum(cast(case((r.identical.is_(True), 1), else_=0), Integer))


def mode_summaries(store: Store, run_id: int) -> list[E.ModeSummary]:
    """Phoenix's results table for a run, aggregated in SQL (percentiles included)."""
    r = Request
    live = (r.run_id == run_id, r.warmup.is_(False))
    with store.session_scope() as s:
        agg = s.execute(
            select(r.mode, func.count(), func.avg(r.latency_s), func.sum(r.output_tokens), func.sum(r.latency_s),
                   func.sum(r.proposed), func.sum(r.accepted), func.sum(r.draft_s), func.sum(r.verify_s),
                   _identical_count(), func.count(r.identical))
            .where(*live).group_by(r.mode).order_by(func.min(r.seq))
        ).all()
        pct = _latency_percentiles(s, live, (50, 95))
    out = []
    for mode, n, mean_lat, toks, secs, prop, acc, d_s, v_s, ident, checked in agg:
        p50, p95 = pct.get(mode, {}).get(50, math.nan), pct.get(mode, {}).get(95, math.nan)
        out.append(E.ModeSummary(mode, n, mean_lat, p50, p95, toks / secs if secs else 0.0, prop or 0, acc or 0,
                                 d_s or 0.0, v_s or 0.0, ident or 0, checked or 0))
    base = next((m.tokens_per_s for m in out if m.mode == "target"), None)
    for m in out:
        m.speedup = m.tokens_per_s / base if base else None
    return out


def _latency_percentiles(s, live, qs: tuple[int, ...]) -> dict[str, dict[int, float]]:
    """numpy's linear-interpolation percentiles, reading only the rows around each rank."""
    r = Request
    ranked = select(r.mode, r.latency_s, (func.row_number().over(partition_by=r.mode, order_by=r.latency_s) - 1).label("i"),
                    func.count().over(partition_by=r.mode).label("n")).where(*live).subquery()
    near = [and_(ranked.c.i >= func.floor((ranked.c.n - 1) * q / 100.0),
                 ranked.c.i <= func.floor((ranked.c.n - 1) * q / 100.0) + 1) for q in qs]
    rows = s.execute(select(ranked.c.mode, ranked.c.i, ranked.c.n, ranked.c.latency_s).where(or_(*near))).all()
    values: dict[str, dict[int, float]] = {}
    sizes: dict[str, int] = {}
    for mode, i, n, lat in rows:
        values.setdefault(mode, {})[int(i)] = lat
        sizes[mode] = int(n)
    out: dict[str, dict[int, float]] = {}
    for mode, by_rank in values.items():
        n = sizes[mode]
        out[mode] = {}
        for q in qs:
            pos = (n - 1) * q / 100.0
            lo = math.floor(pos)
            hi = min(lo + 1, n - 1)
            out[mode][q] = by_rank[lo] + (pos - lo) * (by_rank[hi] - by_rank[lo])
    return out
