"""The series the charts draw: sampled requests, acceptance per position, the bandit over time, latency
percentiles and the queue. Every filter is a bound parameter; aggregation happens in SQL so a page's cost does
not grow with the run."""

from __future__ import annotations

import math

import pandas as pd
from sqlalchemy import Integer, case, cast, func, select

from db import entities as E
from db.connect import StoreBase, status_expr
from db.models import BanditStep, Request, RequestPosition, Run, ServeStep

PLOT_ROWS_PER_MODE = 4000  # request-level charts sample this many rows per mode
BANDIT_POINTS = 2000  # the bandit history is drawn from at most this many windows per mode


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


def identical_count(r=Request):
    return func.sum(cast(case((r.identical.is_(True), 1), else_=0), Integer))


class Series(StoreBase):
    def request_sample(self, run_id: int, per_mode: int = PLOT_ROWS_PER_MODE) -> pd.DataFrame:
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
        with self.session_scope() as s:
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
            frames.append(self._frame(q))
        if not frames:
            return pd.DataFrame(columns=[c.key for c in cols])
        return pd.concat(frames, ignore_index=True).sort_values("seq", ignore_index=True)

    def arm_totals(self, run_id: int) -> pd.DataFrame:
        """Sums per (mode, k) over a run's answered requests (a request that ended in an error, a refused one, has
        no latency or tokens/s of its own: counted apart as failed): the one scan behind the results table and the
        time split, with ``drafts``, the passes that drafted (position 0's proposed)."""
        r, p = Request, RequestPosition
        drafts = (
            select(func.coalesce(func.sum(p.proposed), 0))
            .join(r, p.request_id == r.id)
            .where(r.run_id == run_id, r.warmup.is_(False), r.error.is_(None), p.position == 0)
        )
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
                identical_count().label("identical"),
                func.count(r.identical).label("checked"),
                func.min(r.seq).label("first_seq"),
            )
            .where(r.run_id == run_id, r.warmup.is_(False), r.error.is_(None))
            .group_by(r.mode, r.k)
            .order_by(r.mode, r.k)
        )
        totals = self._frame(q)
        if totals.empty:
            return totals
        by_arm = self._frame(drafts.add_columns(r.mode, r.k).group_by(r.mode, r.k))
        by_arm.columns = ["drafts", "mode", "k"]
        totals = totals.merge(by_arm, on=["mode", "k"], how="left").fillna({"drafts": 0}).astype({"drafts": int})
        failed = self._frame(
            select(r.mode, func.count().label("failed"))
            .where(r.run_id == run_id, r.warmup.is_(False), r.error.is_not(None))
            .group_by(r.mode)
        )
        return totals.merge(failed, on="mode", how="left").fillna({"failed": 0}).astype({"failed": int})

    def positions(self, run_id: int) -> pd.DataFrame:
        r, p = Request, RequestPosition
        return self._frame(_summed_positions(run_id, "mode", "k").order_by(r.mode, r.k, p.position))

    def source_counts(self, run_id: int) -> pd.DataFrame:
        """mode, k and per_source (a dict) of every non-warm-up request a drafter with several sources drafted:
        the hybrid's passes by source (engine.analysis.sources sums them)."""
        r = Request
        q = select(r.mode, r.k, r.per_source).where(
            r.run_id == run_id, r.warmup.is_(False), r.per_source.is_not(None), r.error.is_(None)
        )
        return self._frame(q.order_by(r.seq))

    def bandit_history(self, run_id: int, points: int = BANDIT_POINTS) -> dict[str, pd.DataFrame]:
        """The bandit over time, aggregated in SQL into at most ``points`` windows of decisions per mode,
        so a long run costs the page about what a short one does. A window of one decision keeps its trace id.

        Returns 'choices' (mode, t, chosen_k, n, explored_n, trace_id: per window and chosen arm),
        'signals' (mode, t, n, epsilon, p_not_best, reward: window means) and 'means' (mode, t, arm_means,
        arm_counts: the policy's estimates after each window's last decision)."""
        b, r = BanditStep, Request
        of_run = select(r.mode, func.count(), func.max(b.t)).join(r, r.id == b.request_id).where(r.run_id == run_id)
        with self.session_scope() as s:
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
        cells = self._frame(
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
        means = self._frame(
            steps.add_columns(r.mode, b.t, b.arm_means, b.arm_counts).where(closes).order_by(r.mode, b.t)
        )
        return {"choices": cells[empty["choices"]], "signals": _window_means(cells), "means": means}

    def policy_frame(self, run_id: int) -> pd.DataFrame:
        """Every non-warm-up request of a run with its bandit step, if any (fixed modes have none)."""
        b, r = BanditStep, Request
        q = (
            select(
                r.seq,
                r.mode,
                r.k,
                r.prompt_id,
                r.tokens_per_s,
                r.trace_id,
                b.t,
                b.explored,
                b.fallback,
                b.policy,
                b.arm,
            )
            .outerjoin(b, b.request_id == r.id)
            .where(r.run_id == run_id, r.warmup.is_(False))
            .order_by(r.seq)
        )
        df = self._frame(q)
        df["explored"] = df["explored"].fillna(False).astype(bool)
        df["fallback"] = df["fallback"].fillna(False).astype(bool)
        return df

    def category_positions(self, run_id: int) -> pd.DataFrame:
        """Per-position counts per (mode, prompt), for acceptance curves per category."""
        return self._frame(_summed_positions(run_id, "mode", "prompt_id", "category"))

    def served_requests(self, run_id: int) -> pd.DataFrame:
        """A served run's requests with what latency under load is made of: time to first token, queue, batch."""
        r = Request
        cols = (r.seq, r.mode, r.prompt_id, r.output_tokens, r.latency_s, r.ttft_s, r.tokens_per_s, r.proposed)
        more = (r.accepted, r.queue_s, r.batch_size, r.cached_tokens, r.error, r.identical)
        return self._frame(select(*cols, *more).where(r.run_id == run_id, r.warmup.is_(False)).order_by(r.seq))

    def prefix_rows(self, run_id: int) -> list[tuple[int | None, int, float | None]]:
        """(cached tokens, prompt tokens, TTFT) of a run's answered requests: what its prefix cache did."""
        r = Request
        q = select(r.cached_tokens, r.prompt_tokens, r.ttft_s).where(
            r.run_id == run_id, r.warmup.is_(False), r.error.is_(None)
        )
        with self.session_scope() as s:
            return [(c, p, t) for c, p, t in s.execute(q)]

    def serve_steps_frame(self, run_id: int) -> pd.DataFrame:
        """Phoenix's server loop, step by step (serve_steps)."""
        cols = [c for c in ServeStep.__table__.columns if c.name != "run_id"]
        return self._frame(select(*cols).where(ServeStep.run_id == run_id).order_by(ServeStep.step))

    def latency_percentiles(
        self, run_id: int, sizes: dict[str, int], qs: tuple[int, ...]
    ) -> dict[str, dict[int, float]]:
        """numpy's linear-interpolation percentiles per mode: two rows read at each rank, walking the
        (run_id, mode, warmup, latency_s) index instead of sorting."""
        r = Request
        out: dict[str, dict[int, float]] = {}
        with self.session_scope() as s:
            for mode, n in sizes.items():
                out[mode] = {}
                for q in qs:
                    pos = (n - 1) * q / 100.0
                    i = math.floor(pos)
                    pair = s.scalars(
                        select(r.latency_s)
                        .where(r.run_id == run_id, r.mode == mode, r.warmup.is_(False), r.error.is_(None))
                        .order_by(r.latency_s)
                        .offset(i)
                        .limit(2)
                    ).all()
                    out[mode][q] = pair[0] + (pos - i) * ((pair[1] if len(pair) > 1 else pair[0]) - pair[0])
        return out

    def queue_state(self, run_id: int, recent: int = 200) -> E.QueueState:
        """A queued run's place in the queue (workers claim the oldest first), what runs now, and the work ahead
        priced by each run's own target: the mean time of that target's latest ``recent`` requests (a SmolLM2 run
        ahead of an embedded-pair run costs SmolLM2's time, not the embedded pair's)."""
        live = status_expr()
        with self.session_scope() as s:
            me = s.get(Run, run_id)
            target = me.target if me is not None else ""
            ahead = s.execute(
                select(Run.target, Run.progress_total - Run.progress_done).where(
                    Run.status == "queued", Run.id < run_id
                )
            ).all()
            running = s.execute(
                select(Run.worker_id, Run.target, Run.progress_total - Run.progress_done).where(live == "running")
            ).all()
            means = {
                t: self._mean_request_s(s, t, recent)
                for t in {target, *(t for t, _ in ahead), *(t for _, t, _ in running)}
            }
        left = [(t, max(0, n or 0)) for t, n in ahead] + [(t, max(0, n or 0)) for _, t, n in running]
        priced = all(means[t][0] is not None for t, n in left if n)
        return E.QueueState(
            len(ahead) + 1,
            int(sum(max(0, n or 0) for _, n in ahead)),
            len(running),
            int(sum(max(0, n or 0) for _, _, n in running)),
            sorted({w for w, _, _ in running if w}),
            means[target][0],
            means[target][1],
            float(sum(n * (means[t][0] or 0.0) for t, n in left)) if priced else None,
        )

    @staticmethod
    def _mean_request_s(s, target: str, recent: int) -> tuple[float | None, int]:
        latest = (
            select(Request.latency_s)
            .join(Run, Run.id == Request.run_id)
            .where(Run.target == target, Request.warmup.is_(False))
            .order_by(Request.id.desc())
            .limit(recent)
            .subquery()
        )
        mean, n = s.execute(select(func.avg(latest.c.latency_s), func.count())).one()
        return (float(mean) if mean is not None else None), int(n or 0)
