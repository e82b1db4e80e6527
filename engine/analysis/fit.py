"""Fit the break-even model to a run: a from per-position counts, c from timings."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from engine.analysis.breakeven import fit_a, measured_c, optimum_k, predicted_speedup
from engine.analysis.speedup import speedups_by
from engine.modes import Mode


@dataclass
class RunFit:
    a: float | None
    c: float | None
    target_step_s: float | None
    measured: pd.DataFrame  # k, measured speedup (engine.analysis.speedup, by k), n, verify cost
    k_best_measured: int | None
    best_speedup: float | None
    k_opt: int | None


def reached_of(pos: pd.DataFrame) -> list[int] | None:
    """Summed per-position 'reached' counts, or None when any row predates them (0015)."""
    if "reached" not in pos or pos["reached"].isna().any():
        return None
    return pos.groupby("position")["reached"].sum().sort_index().astype(int).tolist()


def fit_run(
    pos: pd.DataFrame,
    split: pd.DataFrame,
    rewards: pd.DataFrame,
    run_drafter: str = "model",
    drafter_arms: bool = False,
) -> RunFit:
    """``rewards``: the run's prompt_id, mode, k and tokens_per_s per request (Store.prompt_rewards), for the
    measured points, which are the run's speedup per arm (the one definition). The fit covers the modes that draft
    with ``run_drafter`` (--drafter: its bandits and its fixed modes). ``drafter_arms``: the run's bandits chose
    among drafters (--drafter-arms), so their requests mix drafters and stay out of a fit that assumes one."""

    def fitted(mode: str) -> bool:
        m = Mode.of(mode)
        return m.drafts_with(run_drafter) and not (drafter_arms and m.is_bandit)

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
    measured = _measured(target, model_modes[model_modes["k"] > 0], rewards, step, fitted)
    best = measured.loc[measured["measured speedup"].idxmax()] if measured["measured speedup"].notna().any() else None
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


def _measured(target: pd.DataFrame, drafted: pd.DataFrame, rewards: pd.DataFrame, step, fitted) -> pd.DataFrame:
    """Per arm (a fixed mode such as model_<k>, or one k of a bandit): its speedup, the Run page's number for a
    fixed mode, and its n; and V(k+1), one verify of the pending token and k drafts in target steps, as this run
    measured it over every request that drafted k (a cost of the width, whichever mode chose it). k = 0 is
    target-only itself: 1.0 and one step by definition (a bandit's k = 0 requests are not pooled with it)."""
    cols = ["arm", "k", "measured speedup", "n", "verify cost"]
    if target.empty:
        return pd.DataFrame(columns=cols)
    keep = rewards[(rewards["mode"] == "target") | (rewards["mode"].map(fitted) & (rewards["k"] > 0))]
    keep = keep.assign(arm=[Mode.of(m).arm_label(int(k)) for m, k in zip(keep["mode"], keep["k"])])
    by_arm = speedups_by(keep, "arm", "target")
    widths = pd.concat([target, drafted]).groupby("k")[["verify_s", "passes"]].sum()
    rows = [
        {"arm": "target", "k": 0, "measured speedup": 1.0, "n": len(keep[keep["mode"] == "target"]), "verify cost": 1.0}
    ]
    for r in drafted.itertuples():
        arm = Mode.of(r.mode).arm_label(int(r.k))
        s, w = by_arm.get(arm), widths.loc[r.k]
        verify = float(w.verify_s / w.passes / step) if (step and w.passes) else None
        rows.append(
            {
                "arm": arm,
                "k": int(r.k),
                "measured speedup": s.median if s else None,
                "n": s.n if s else 0,
                "verify cost": verify,
            }
        )
    return pd.DataFrame(rows, columns=cols).sort_values(["k", "arm"], kind="stable").reset_index(drop=True)


def predictions(fit: RunFit) -> list[dict]:
    """The break-even model against the measurement, arm by arm: the model's speedup at the arm's k as the
    Break-even page states it (a verify of k+1 tokens priced at one target step), and with the verify cost the run
    measured for that width, beside the arm's measured speedup (the median per-prompt one) and the model's relative
    error. The one place this check is computed: the published findings read it."""
    if fit.a is None or fit.c is None:
        return []
    out = []
    for r in fit.measured.to_dict("records"):
        measured, verify = r["measured speedup"], r["verify cost"]
        if int(r["k"]) == 0 or measured is None or measured != measured:
            continue
        k = int(r["k"])
        predicted = predicted_speedup(fit.a, fit.c, k)
        costed = predicted_speedup(fit.a, fit.c, k, float(verify)) if verify is not None and verify == verify else None
        out.append(
            {"arm": r["arm"], "k": k, "predicted": predicted, "predicted_measured_verify": costed,
             "measured": float(measured), "n": int(r["n"]), "error": abs(predicted / float(measured) - 1)}
        )  # fmt: skip
    return out
