"""The break-even model and the statistics the dashboard and benchmarks share.

Expected tokens per verification pass with per-token acceptance a and k drafts:
E(a, k) = 1 + a + ... + a^k. A pass costs 1 + c*k target steps, where c is the
draft's cost per token relative to one target step. Speedup = E / (1 + c*k).
"""

from __future__ import annotations

import math

import numpy as np

from engine.modes import K_MAX


def expected_tokens(a: float, k: int) -> float:
    return float(sum(a**i for i in range(k + 1)))


def predicted_speedup(a: float, c: float, k: int, verify: float = 1.0) -> float:
    """E(a,k) / (V + c·k): ``verify`` is the cost of verifying k+1 tokens in target steps, 1 in the textbook model
    and measured per arm by a run (engine.analysis.fit) or by benchmarks/limits.py."""
    return expected_tokens(a, k) / (verify + c * k)


def optimum_k(a: float, c: float, k_max: int = K_MAX) -> int:
    return max(range(k_max + 1), key=lambda k: (predicted_speedup(a, c, k), -k))


def breakeven_c(a: float, k: int) -> float:
    """The draft cost at which k drafts stop paying: E(a,k) / (1 + c k) = 1."""
    return (expected_tokens(a, k) - 1.0) / k if k else float("inf")


def rates(
    proposed: list[int], accepted: list[int], reached: list[int] | None = None
) -> tuple[list[float], list[float]]:
    """Unconditional (vLLM: accepted_i / drafts) and conditional rates. Position i's conditional rate is accepted_i
    over the passes that reached it (proposed it with every earlier position accepted). Without those counts
    (rows before 0015) it is accepted_i / min(accepted_{i-1}, proposed_i), exact when the draft length is fixed."""
    drafts, bases = trials(proposed, accepted, reached)
    uncond = [acc / drafts if drafts else float("nan") for acc in accepted]
    cond = [acc / base if base else float("nan") for acc, base in zip(accepted, bases)]
    return uncond, cond


def trials(proposed: list[int], accepted: list[int], reached: list[int] | None = None) -> tuple[int, list[int]]:
    """The denominators of ``rates``: the drafts (every position's unconditional rate), and per position the
    passes that reached it (its conditional rate). Intervals and sample sizes come from these."""
    drafts = proposed[0] if proposed else 0
    bases, prev = [], drafts
    for i, (acc, prop) in enumerate(zip(accepted, proposed)):
        bases.append(
            reached[i] if reached is not None and i < len(reached) and reached[i] is not None else min(prev, prop)
        )
        prev = acc
    return drafts, bases


def survival(proposed: list[int], accepted: list[int], reached: list[int] | None = None) -> list[float]:
    """P(the first i+1 drafted tokens are accepted) had every pass proposed position i: the product of the
    conditional rates. With a fixed k it equals the unconditional rate; with an adaptive drafter the unconditional
    rate also counts positions that were never proposed, as if they had been rejected."""
    out, s = [], 1.0
    for c in rates(proposed, accepted, reached)[1]:
        s = s * c if not math.isnan(c) else float("nan")
        out.append(s)
    return out


def fit_a(proposed: list[int], accepted: list[int], reached: list[int] | None = None) -> float | None:
    """Least-squares fit of a^(i+1) to the per-position survival, weighted by the proposals at each position."""
    from scipy.optimize import curve_fit

    surv = survival(proposed, accepted, reached)
    pts = [(i, u) for i, (u, p) in enumerate(zip(surv, proposed)) if p and not math.isnan(u)]
    if not pts:
        return None
    x = np.array([i for i, _ in pts], dtype=float)
    y = np.array([u for _, u in pts], dtype=float)
    w = np.array([proposed[i] for i, _ in pts], dtype=float)
    try:
        (a,), _ = curve_fit(lambda i, a: a ** (i + 1), x, y, p0=[0.5], bounds=(0.0, 1.0), sigma=1 / np.sqrt(w))
    except (RuntimeError, ValueError):
        return None
    return float(a)


def measured_c(draft_s: float, proposed: int, target_step_s: float) -> float | None:
    """Draft seconds per drafted token over the seconds of one target-only step."""
    if not proposed or not target_step_s:
        return None
    return (draft_s / proposed) / target_step_s


def diagnose(a: float | None, best_speedup: float | None, c: float | None, k_best: int | None) -> str:
    if a is None:
        return "No drafting data yet: run a model_<k> or bandit mode."
    if a < 0.5:
        return (
            f"Low acceptance (a = {a:.2f}): the drafter does not predict this target on this workload. "
            "Distil the draft on the target's outputs, or try the n-gram drafter on repetitive text."
        )
    if best_speedup is not None and best_speedup < 1.0:
        if c is not None and k_best is not None and c > breakeven_c(a, max(k_best, 1)):
            return (
                f"High acceptance (a = {a:.2f}) but no win: the draft is too expensive (c = {c:.2f} is above "
                f"the break-even c = {breakeven_c(a, max(k_best, 1)):.2f} at k = {k_best}). Use a cheaper draft."
            )
        return (
            f"High acceptance (a = {a:.2f}) but no win: verification or overhead costs more than the model "
            "assumes, or k is past the peak. Try a smaller k."
        )
    return f"Speculation pays here (a = {a:.2f})."


def measured_speedups(summaries) -> list[tuple[str, float]]:
    """Every drafting mode's median speedup over target-only (engine.analysis summaries), as the table beside the
    verdict shows it."""
    return [(m.mode, m.speedup.median) for m in summaries if m.speedup and m.speedup.median and m.proposed]


def verdict(
    a: float | None,
    best_speedup: float | None,
    c: float | None,
    k_best: int | None,
    measured: list[tuple[str, float]],
) -> str:
    """The diagnosis beside the run's measured speedups (mode, median x target-only), never contradicting them:
    where every mode measured loses, no page says speculation pays; where the fitted model and the measurement
    disagree, one sentence says so and the measurement is the evidence. One verdict for every page."""
    text = diagnose(a, best_speedup, c, k_best)
    if a is None or not measured:
        return text
    mode, best = max(measured, key=lambda m: m[1])
    if best < 1.0 and text.startswith("Speculation pays"):
        return (
            f"Speculation does not pay in this run: every mode measured lost to target-only (the best, {mode}, ran at "
            f"{best:.2f}x). The fitted model (a = {a:.2f}) predicts a gain; the measurement disagrees, and it is the "
            "evidence: drafting or verification costs more here than the model assumes."
        )
    if best > 1.0 and not text.startswith("Speculation pays"):
        return (
            f"{text} Yet {mode} measured {best:.2f}x target-only: the fitted model and the measurement disagree, and "
            "the measurement is the evidence (the fit covers the run's --drafter only)."
        )
    return text


def optimum_note(a: float, c: float, measured, k_max: int = K_MAX) -> str:
    """Why the model's optimum k and the run's best measured k agree or not, in one sentence. ``measured``: the
    fit's per-arm table (k, measured speedup, verify cost). The model prices a verify of k+1 tokens at one target
    step; where the run measured it dearer, the optimum under the measured cost is the one to compare with."""
    k_opt = optimum_k(a, c, k_max)
    points = measured.dropna(subset=["measured speedup"])
    points = points[points["k"] > 0]
    if points.empty:
        return f"The model's optimum is k = {k_opt}; the run measured no drafting arm to check it against."
    best = points.loc[points["measured speedup"].idxmax()]
    k_best, s_best = int(best["k"]), float(best["measured speedup"])
    head = f"The model's optimum is k = {k_opt} ({predicted_speedup(a, c, k_opt):.2f}x predicted)"
    # the fit covers one drafter's arms: its best arm, not the run's best mode (the verdict names that one), so two
    # sentences on one page never name two different "best" arms as the same thing
    if k_best == k_opt:
        return f"{head}; the fitted drafter's best measured arm is the same k ({best['arm']}, {s_best:.2f}x)."
    tried = sorted(int(k) for k in points["k"].unique())
    costed = points.dropna(subset=["verify cost"])
    text = f"{head}; the fitted drafter's best measured arm is {best['arm']} ({s_best:.2f}x)."
    if k_opt not in tried:
        text += f" The run did not try k = {k_opt} (it tried {', '.join(map(str, tried))})."
    if not costed.empty:
        by_v = {int(k): predicted_speedup(a, c, int(k), float(v)) for k, v in zip(costed["k"], costed["verify cost"])}
        k_v = max(by_v, key=lambda k: by_v[k])
        worst = costed.loc[costed["verify cost"].idxmax()]
        text += (
            f" With the verify cost this run measured (up to {float(worst['verify cost']):.2f} target steps at "
            f"k = {int(worst['k'])}, not 1), the model's best tried k is {k_v} ({by_v[k_v]:.2f}x)"
            + (", the measured one." if k_v == k_best else "; the rest of the gap is drafting and Python overhead.")
        )
    return text
