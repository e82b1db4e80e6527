"""Read-side aggregates for the dashboard. Every filter is a bound parameter."""
from __future__ import annotations

import pandas as pd
from sqlalchemy import Integer, and_, case, cast, func, select

from db.models import BanditStep, Request, RequestPosition, Run
from db.store import Store

PLOT_ROWS_PER_MODE = 4000  # request-level charts sample this many rows per mode


def _frame(store: Store, stmt) -> pd.DataFrame:
    with store.session_scope() as s:
        result = s.execute(stmt)
        return pd.DataFrame(result.all(), columns=list(result.keys()))


def runs_frame(store: Store, name: str = "", model: str = "", status: str = "") -> pd.DataFrame:
    q = select(Run.id, Run.name, Run.status, Run.target, Run.draft, Run.created_at, Run.finished_at,
               Run.progress_done, Run.progress_total, Run.error, Run.config).order_by(Run.id.desc())
    if name:
        q = q.where(Run.name.contains(name, autoescape=True))
    if model:
        q = q.where(Run.target.contains(model, autoescape=True) | Run.draft.contains(model, autoescape=True))
    if status:
        q = q.where(Run.status == status)
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


def bandit_frame(store: Store, run_id: int) -> pd.DataFrame:
    b, r = BanditStep, Request
    q = (select(b.t, b.epsilon, b.explored, b.chosen_k, b.reward, b.arm_means, b.arm_counts, r.seq, r.trace_id, r.mode,
                b.policy, b.fallback)
         .join(r, r.id == b.request_id).where(r.run_id == run_id).order_by(r.seq))
    return _frame(store, q)


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
