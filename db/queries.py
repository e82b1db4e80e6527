"""Every aggregate read: the results table, the dashboard's frames, the benchmarks' figures.
Every filter is a bound parameter; aggregation happens in SQL so a page's cost does not
grow with the run."""

from __future__ import annotations

import math

import pandas as pd
from sqlalchemy import Integer, and_, case, cast, func, select

from db import entities as E
from db.models import BanditStep, Request, RequestPosition, Run, RunTag
from db.store import STALE_AFTER_S, Store, status_expr

PLOT_ROWS_PER_MODE = 4000  # request-level charts sample this many rows per mode
BANDIT_POINTS = 2000  # the bandit history is drawn from at most this many windows per mode


def _frame(store: Store, stmt) -> pd.DataFrame:
    with store.session_scope() as s:
        result = s.execute(stmt)
        return pd.DataFrame(result.all(), columns=list(result.keys()))


RUN_SORTS = {"id": Run.id, "name": Run.name, "status": Run.status, "target": Run.target, "created_at": Run.created_at}


def _run_filters(name: str, model: str, status: str, tag: str, archived: bool, stale_after_s: float) -> list:
    shown = status_expr(stale_after_s)
    cond = []
    if name:
        cond.append(Run.name.contains(name, autoescape=True))
    if model:
        cond.append(Run.target.contains(model, autoescape=True) | Run.draft.contains(model, autoescape=True))
    if status:
        cond.append(shown == status)
    if tag:
        cond.append(Run.id.in_(select(RunTag.run_id).where(RunTag.tag == tag)))
    if not archived:
        cond.append(Run.archived.is_(False))
    return cond


def runs_frame(
    store: Store,
    name: str = "",
    model: str = "",
    status: str = "",
    tag: str = "",
    archived: bool = False,
    limit: int | None = None,
    offset: int = 0,
    sort: str = "id",
    descending: bool = True,
    stale_after_s: float = STALE_AFTER_S,
) -> pd.DataFrame:
    """One page of runs, filtered, sorted and paged in SQL; tags joined in as one comma-separated string."""
    shown = status_expr(stale_after_s)
    tags = (
        select(func.aggregate_strings(RunTag.tag, ",")).where(RunTag.run_id == Run.id).correlate(Run).scalar_subquery()
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
        .where(*_run_filters(name, model, status, tag, archived, stale_after_s))
        .order_by(key.desc() if descending else key.asc(), Run.id.desc())
        .offset(offset)
    )
    return _frame(store, q.limit(limit) if limit else q)


def runs_count(
    store: Store,
    name: str = "",
    model: str = "",
    status: str = "",
    tag: str = "",
    archived: bool = False,
    stale_after_s: float = STALE_AFTER_S,
) -> int:
    q = select(func.count()).select_from(Run).where(*_run_filters(name, model, status, tag, archived, stale_after_s))
    with store.session_scope() as s:
        return s.scalar(q) or 0


def run_mode_rates(store: Store, run_ids: list[int]) -> pd.DataFrame:
    """Per (run, mode): requests, prompts, and tokens/s (the mean of per-request tokens/s, Phoenix's one definition)."""
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
    return _frame(store, q)


def request_sample(store: Store, run_id: int, per_mode: int = PLOT_ROWS_PER_MODE) -> pd.DataFrame:
    """Request-level rows for strip and distribution charts: per mode, at most ``per_mode`` rows spread evenly over
    the run (every n-th by seq), so a long bandit run shows its whole course and not only its exploration."""
    r = Request
    cols = (
        r.id,
        r.seq,
        r.mode,
        r.k,
        r.latency_s,
        r.tokens_per_s,
        r.draft_s,
        r.verify_s,
        r.trace_id,
        r.prompt_id,
        r.accepted,
        r.proposed,
    )
    with store.session_scope() as s:
        sizes = dict(
            s.execute(
                select(r.mode, func.count()).where(r.run_id == run_id, r.warmup.is_(False)).group_by(r.mode)
            ).all()
        )
    frames = []
    for mode, n in sizes.items():
        step = max(1, math.ceil(n / per_mode))
        ranked = (
            select(*cols, (func.row_number().over(order_by=r.seq) - 1).label("rank"))
            .where(r.run_id == run_id, r.mode == mode, r.warmup.is_(False))
            .subquery()
        )
        q = select(*[ranked.c[c.key] for c in cols]).where(ranked.c.rank % step == 0).order_by(ranked.c.seq)
        frames.append(_frame(store, q))
    if not frames:
        return pd.DataFrame(columns=[c.key for c in cols])
    return pd.concat(frames, ignore_index=True).sort_values("seq", ignore_index=True)


def arm_totals(store: Store, run_id: int) -> pd.DataFrame:
    """Sums per (mode, k) over a run's requests: the one scan behind the results table and the time split."""
    r = Request
    q = (
        select(
            r.mode,
            r.k,
            func.count().label("n"),
            func.sum(r.draft_s).label("draft_s"),
            func.sum(r.verify_s).label("verify_s"),
            func.sum(r.latency_s).label("latency_s"),
            func.sum(r.passes).label("passes"),
            func.sum(r.proposed).label("proposed"),
            func.sum(r.accepted).label("accepted"),
            func.sum(r.output_tokens).label("output_tokens"),
            func.sum(r.tokens_per_s).label("tokens_per_s_sum"),
            func.sum(r.prefill_s).label("prefill_s"),
            func.sum(r.draft_prefill_s).label("draft_prefill_s"),
            _identical_count().label("identical"),
            func.count(r.identical).label("checked"),
            func.min(r.seq).label("first_seq"),
        )
        .where(r.run_id == run_id, r.warmup.is_(False))
        .group_by(r.mode, r.k)
        .order_by(r.mode, r.k)
    )
    return _frame(store, q)


def _summed_positions(run_id: int, *keys):
    """Per-position sums of proposed, accepted and reached over a run's non-warm-up requests, grouped by the
    request columns ``keys`` and the position: the one query behind every acceptance curve."""
    r, p = Request, RequestPosition
    cols = [getattr(r, k) for k in keys]
    sums = (
        func.sum(p.proposed).label("proposed"),
        func.sum(p.accepted).label("accepted"),
        func.sum(p.reached).label("reached"),
    )
    return (
        select(*cols, p.position, *sums)
        .join(p, p.request_id == r.id)
        .where(r.run_id == run_id, r.warmup.is_(False))
        .group_by(p.position, *cols)  # position first: ~15% faster on SQLite
    )


def positions(store: Store, run_id: int) -> pd.DataFrame:
    r, p = Request, RequestPosition
    return _frame(store, _summed_positions(run_id, "mode", "k").order_by(r.mode, r.k, p.position))


def bandit_history(store: Store, run_id: int, points: int = BANDIT_POINTS) -> dict[str, pd.DataFrame]:
    """The bandit over time, aggregated in SQL into at most ``points`` windows of decisions per mode,
    so a long run costs the page about what a short one does. A window of one decision keeps its trace id.

    Returns 'choices' (mode, t, chosen_k, n, explored_n, trace_id: per window and chosen arm),
    'signals' (mode, t, n, epsilon, p_not_best, reward: window means) and 'means' (mode, t, arm_means,
    arm_counts: the policy's estimates after each window's last decision)."""
    b, r = BanditStep, Request
    of_run = select(r.mode, func.count(), func.max(b.t)).join(r, r.id == b.request_id).where(r.run_id == run_id)
    with store.session_scope() as s:
        modes = s.execute(of_run.group_by(r.mode).order_by(r.mode)).all()
    empty = {
        "choices": ["mode", "t", "chosen_k", "n", "explored_n", "trace_id"],
        "signals": ["mode", "t", "n", "epsilon", "p_not_best", "reward"],
        "means": ["mode", "t", "arm_means", "arm_counts"],
    }
    if not modes:
        return {k: pd.DataFrame(columns=cols) for k, cols in empty.items()}
    width = case({m: max(1, math.ceil(n / points)) for m, n, _ in modes}, value=r.mode)
    last = case({m: last_t for m, _, last_t in modes}, value=r.mode)
    win = cast(func.floor(b.t / (width * 1.0)), Integer)  # float division: PostgreSQL divides integers exactly
    steps = select().select_from(b).join(r, r.id == b.request_id).where(r.run_id == run_id)
    explored = func.sum(cast(case((b.explored.is_(True), 1), else_=0), Integer))
    cells = _frame(
        store,
        steps.add_columns(
            r.mode,
            win.label("win"),
            func.min(b.t).label("t"),
            b.chosen_k,
            func.count().label("n"),
            explored.label("explored_n"),
            func.max(r.trace_id).label("trace_id"),
            func.sum(b.epsilon).label("eps_sum"),
            func.count(b.epsilon).label("eps_n"),
            func.sum(b.p_not_best).label("pnb_sum"),
            func.count(b.p_not_best).label("pnb_n"),
            func.sum(b.reward).label("reward_sum"),
        )
        .group_by(r.mode, win, b.chosen_k)
        .order_by(r.mode, win, b.chosen_k),
    )
    closes = ((b.t + 1) % width == 0) | (b.t == last)  # the last decision of each window
    means = _frame(store, steps.add_columns(r.mode, b.t, b.arm_means, b.arm_counts).where(closes).order_by(r.mode, b.t))
    return {"choices": cells[empty["choices"]], "signals": _window_means(cells), "means": means}


def _window_means(cells: pd.DataFrame) -> pd.DataFrame:
    """Per window: mean epsilon, P(not best) and reward from the per-(window, arm) sums."""
    cells = cells.astype({c: float for c in ("eps_sum", "eps_n", "pnb_sum", "pnb_n", "reward_sum")})  # NULL sums: NaN
    g = (
        cells.groupby(["mode", "win"], sort=True)
        .agg(
            t=("t", "min"),
            n=("n", "sum"),
            eps_sum=("eps_sum", "sum"),
            eps_n=("eps_n", "sum"),
            pnb_sum=("pnb_sum", "sum"),
            pnb_n=("pnb_n", "sum"),
            reward_sum=("reward_sum", "sum"),
        )
        .reset_index()
    )
    return pd.DataFrame(
        {
            "mode": g["mode"],
            "t": g["t"],
            "n": g["n"],
            "epsilon": (g["eps_sum"] / g["eps_n"]).where(g["eps_n"] > 0),
            "p_not_best": (g["pnb_sum"] / g["pnb_n"]).where(g["pnb_n"] > 0),
            "reward": g["reward_sum"] / g["n"],
        }
    )


def policy_frame(store: Store, run_id: int) -> pd.DataFrame:
    """Every non-warm-up request of a run with its bandit step, if any (fixed modes have none)."""
    b, r = BanditStep, Request
    q = (
        select(
            r.seq, r.mode, r.k, r.prompt_id, r.tokens_per_s, r.trace_id, b.t, b.explored, b.fallback, b.policy, b.arm
        )
        .outerjoin(b, b.request_id == r.id)
        .where(r.run_id == run_id, r.warmup.is_(False))
        .order_by(r.seq)
    )
    df = _frame(store, q)
    df["explored"] = df["explored"].fillna(False).astype(bool)
    df["fallback"] = df["fallback"].fillna(False).astype(bool)
    return df


def identity(store: Store, run_id: int) -> tuple[int, int, pd.DataFrame]:
    """(identical, checked, mismatches) for a run; mismatches carry their diverging position."""
    r = Request
    with store.session_scope() as s:
        same, checked = s.execute(
            select(
                func.coalesce(func.sum(cast(case((r.identical.is_(True), 1), else_=0), Integer)), 0),
                func.count(r.identical),
            ).where(r.run_id == run_id, r.warmup.is_(False))
        ).one()
    bad = _frame(
        store,
        select(r.id, r.seq, r.mode, r.k, r.prompt_id, r.diverged_at, r.trace_id)
        .where(r.run_id == run_id, r.warmup.is_(False), r.identical.is_(False))
        .order_by(r.seq)
        .limit(200),
    )
    return int(same), int(checked), bad


def requests_frame(
    store: Store,
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
    return _frame(store, q)


def request_detail(store: Store, request_id: int) -> tuple[dict | None, pd.DataFrame]:
    r, p = Request, RequestPosition
    with store.session_scope() as s:
        row = s.execute(select(r).where(r.id == request_id)).scalar_one_or_none()
        info = None if row is None else {c.name: getattr(row, c.name) for c in r.__table__.columns}
    pos = _frame(
        store, select(p.position, p.proposed, p.accepted).where(p.request_id == request_id).order_by(p.position)
    )
    return info, pos


def rewards(store: Store, run_id: int, modes: list[str]) -> pd.DataFrame:
    r = Request
    q = (
        select(r.run_id, r.mode, r.prompt_id, r.category, r.tokens_per_s, r.latency_s, r.accepted, r.proposed)
        .where(r.run_id == run_id, r.mode.in_(modes), r.warmup.is_(False))
        .order_by(r.seq)
    )
    return _frame(store, q)


def _identical_count(r=Request):
    return func.sum(cast(case((r.identical.is_(True), 1), else_=0), Integer))


def mode_summaries(store: Store, run_id: int, totals: pd.DataFrame | None = None) -> list[E.ModeSummary]:
    """Phoenix's results table for a run, from the (mode, k) sums and SQL percentiles."""
    totals = arm_totals(store, run_id) if totals is None else totals
    if totals.empty:
        return []
    per_mode = totals.groupby("mode", sort=False).sum(numeric_only=True).sort_values("first_seq")
    pct = latency_percentiles(store, run_id, {m: int(n) for m, n in per_mode["n"].items()}, (50, 95))
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
            )
        )
    return out


def warmup_count(store: Store, run_id: int) -> int:
    """Warm-up requests of a run: stored, and left out of every figure."""
    r = Request
    with store.session_scope() as s:
        return int(s.scalar(select(func.count()).select_from(r).where(r.run_id == run_id, r.warmup.is_(True))) or 0)


def category_requests(store: Store, run_id: int) -> pd.DataFrame:
    """What a per-category report needs of every non-warm-up request: prompt, mode, category, turn, reward,
    passes and accepted drafts."""
    r = Request
    return _frame(
        store,
        select(
            r.prompt_id, r.mode, r.category, r.turn, r.drafter, r.tokens_per_s, r.passes, r.accepted, r.proposed
        ).where(r.run_id == run_id, r.warmup.is_(False), r.error.is_(None)),
    )


def category_positions(store: Store, run_id: int) -> pd.DataFrame:
    """Per-position counts per (mode, prompt), for acceptance curves per category."""
    return _frame(store, _summed_positions(run_id, "mode", "prompt_id", "category"))


def prompt_rewards(store: Store, run_id: int) -> pd.DataFrame:
    """prompt_id, category, mode, k and tokens_per_s of every answered non-warm-up request: what speedups are
    built from (category: a Spec-Bench column's share of them)."""
    r = Request
    q = select(r.prompt_id, r.category, r.mode, r.k, r.tokens_per_s).where(
        r.run_id == run_id, r.warmup.is_(False), r.error.is_(None)
    )
    return _frame(store, q)


def same_target_runs(store: Store, run_id: int, target: str, limit: int = 10) -> list[int]:
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
    with store.session_scope() as s:
        return list(s.scalars(q))


def prompt_rewards_of_runs(store: Store, run_ids: list[int]) -> pd.DataFrame:
    """The same rows for several runs, with run_id: the Runs list's best speedup of each."""
    r = Request
    q = select(r.run_id, r.prompt_id, r.mode, r.tokens_per_s).where(
        r.run_id.in_(run_ids), r.warmup.is_(False), r.error.is_(None)
    )
    return _frame(store, q)


def latency_percentiles(
    store: Store, run_id: int, sizes: dict[str, int], qs: tuple[int, ...]
) -> dict[str, dict[int, float]]:
    """numpy's linear-interpolation percentiles per mode: two rows read at each rank, walking the
    (run_id, mode, warmup, latency_s) index instead of sorting."""
    r = Request
    out: dict[str, dict[int, float]] = {}
    with store.session_scope() as s:
        for mode, n in sizes.items():
            out[mode] = {}
            for q in qs:
                pos = (n - 1) * q / 100.0
                i = math.floor(pos)
                pair = s.scalars(
                    select(r.latency_s)
                    .where(r.run_id == run_id, r.mode == mode, r.warmup.is_(False))
                    .order_by(r.latency_s)
                    .offset(i)
                    .limit(2)
                ).all()
                out[mode][q] = pair[0] + (pos - i) * ((pair[1] if len(pair) > 1 else pair[0]) - pair[0])
    return out


def queue_state(store: Store, run_id: int, recent: int = 200) -> E.QueueState:
    """A queued run's place in the queue (workers claim the oldest first), what runs now, and the mean time of the
    target's latest ``recent`` requests, the figure an ETA can rest on."""
    live = status_expr()
    with store.session_scope() as s:
        me = s.get(Run, run_id)
        target = me.target if me is not None else ""
        ahead_n, ahead_left = s.execute(
            select(func.count(), func.coalesce(func.sum(Run.progress_total - Run.progress_done), 0)).where(
                Run.status == "queued", Run.id < run_id
            )
        ).one()
        running = s.execute(
            select(Run.worker_id, Run.progress_total - Run.progress_done).where(live == "running")
        ).all()
        latest = (
            select(Request.latency_s)
            .join(Run, Run.id == Request.run_id)
            .where(Run.target == target, Request.warmup.is_(False))
            .order_by(Request.id.desc())
            .limit(recent)
            .subquery()
        )
        mean, n = s.execute(select(func.avg(latest.c.latency_s), func.count())).one()
    return E.QueueState(
        int(ahead_n) + 1,
        int(ahead_left or 0),
        len(running),
        int(sum(max(0, left or 0) for _, left in running)),
        sorted({w for w, _ in running if w}),
        float(mean) if mean is not None else None,
        int(n or 0),
    )
