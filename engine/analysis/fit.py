"""Fit the break-even model to a run: a from per-position counts, c from timings."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from engine.analysis.breakeven import fit_a, measured_c, optimum_k
from engine.modes import Mode


@dataclass
class RunFit:
    a: float | None
    c: float | None
    target_step_s: float | None
    measured: pd.DataFrame  # k, measured speedup, n, verify cost (model-drafter arms)
    k_best_measured: int | None
    best_speedup: float | None
    k_opt: int | None


def reached_of(pos: pd.DataFrame) -> list[int] | None:
    """Summed per-position 'reached' counts, or None when any row predates them (0015)."""
    if "reached" not in pos or pos["reached"].isna().any():
        return None
    return pos.groupby("position")["reached"].sum().sort_index().astype(int).tolist()


def fit_run(pos: pd.DataFrame, split: pd.DataFrame, drafter_arms: bool = False) -> RunFit:
    """``drafter_arms``: the run's bandits chose among drafters (--drafter-arms), so their requests mix drafters
    and stay out of a fit that assumes one."""

    def fitted(mode: str) -> bool:
        m = Mode.of(mode)
        return m.uses_drafter and not (drafter_arms and m.is_bandit)

    model_modes = split[split["mode"].map(fitted)]
    model_pos = pos[pos["mode"].map(fitted)]
    a = None
    if not model_pos.empty:
        summed = model_pos.groupby("position")[["proposed", "accepted"]].sum().sort_index()
        a = fit_a(
            summed["proposed"].astype(int).tolist(), summed["accepted"].astype(int).tolist(), reached_of(model_pos)
        )
    target = split[split["mode"] == "target"]
    # verify_s and draft_s hold decode passes only (prefill is stored apart), so these are per-pass figures
    step = (
        float(target["verify_s"].sum() / target["passes"].sum())
        if not target.empty and target["passes"].sum()
        else None
    )
    c = measured_c(float(model_modes["draft_s"].sum()), int(model_modes["proposed"].sum()), step) if step else None
    base = (target["tokens_per_s_sum"].sum() / target["n"].sum()) if not target.empty else None
    rows = []
    if base:
        arms = pd.concat([target, model_modes]).groupby("k")[["tokens_per_s_sum", "n", "verify_s", "passes"]].sum()
        for k, r in arms.iterrows():  # tokens/s as everywhere: the mean of per-request tokens/s
            # V(k+1): one verify of the pending token and k drafts, in target steps, as this run measured it
            verify = float(r.verify_s / r.passes / step) if (step and r.passes) else None
            rows.append(
                {
                    "k": int(k),
                    "measured speedup": float(r.tokens_per_s_sum / r.n / base),
                    "n": int(r.n),
                    "verify cost": verify,
                }
            )
    measured = pd.DataFrame(rows, columns=["k", "measured speedup", "n", "verify cost"])
    best = measured.loc[measured["measured speedup"].idxmax()] if not measured.empty else None
    k_opt = optimum_k(a, c) if (a is not None and c is not None) else None
    return RunFit(
        a,
        c,
        step,
        measured,
        None if best is None else int(best["k"]),
        None if best is None else float(best["measured speedup"]),
        k_opt,
    )
