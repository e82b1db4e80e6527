"""Two settings of one server measured in alternating rounds (the ``rounds`` block of engine.export.published):
per level, each setting's output tok/s round by round, and the ratio of their totals with the range of the
per-round ratios. A "faster" needs every round to agree; otherwise the rounds are the noise and it says "mixed"."""

from __future__ import annotations

from collections import defaultdict

from engine.analysis import sweeps as S
from engine.errors import PhoenixError
from engine.export.run_ids import run_ids


def _levels(fig, runs: list[int], variant: str) -> dict[str, list[tuple[int, float, float]]]:
    """Level label -> (run, output tokens, wall seconds) of ``variant``, one per round."""
    out: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    for run_id in runs:
        cfg = fig.run(run_id).config or {}
        f = (cfg.get("figures") or {}).get(variant)
        if not isinstance(f, dict) or not f.get("wall_s"):
            raise PhoenixError(f"run #{run_id} has no figures for {variant!r}")
        label = f"c={cfg.get('level')}" if cfg.get("request_rate") is None else f"rate={cfg['request_rate']}"
        out[label].append((run_id, f["output_throughput"] * f["wall_s"], f["wall_s"]))
    return out


def rounds(fig, args: str) -> str:
    """ARGS: ``VARIANT A_RUNS B_RUNS NAME_A NAME_B``; run lists as elsewhere (``1-3,7``)."""
    variant, a_runs, b_runs, name_a, name_b = args.split()
    a, b = _levels(fig, run_ids(a_runs), variant), _levels(fig, run_ids(b_runs), variant)
    if set(a) != set(b) or any(len(a[k]) != len(b[k]) for k in a):
        raise PhoenixError(f"rounds: {a_runs} and {b_runs} must hold the same levels, as many rounds each")
    lines = [
        f"| load | {name_a}: tok/s by round | {name_b}: tok/s by round | {name_b} / {name_a} (rounds' range) | "
        "verdict | runs |",
        "|---|---|---|---|---|---|",
    ]
    for level in sorted(a, key=lambda s: float(s.split("=")[1])):
        per_a = [tokens / wall for _, tokens, wall in a[level]]
        per_b = [tokens / wall for _, tokens, wall in b[level]]
        total = (sum(t for _, t, _ in b[level]) / sum(w for _, _, w in b[level])) / (
            sum(t for _, t, _ in a[level]) / sum(w for _, _, w in a[level])
        )
        ratios = [y / x for x, y in zip(per_a, per_b)]
        verdict = (
            f"{name_b} faster" if min(ratios) > 1 else f"{name_a} faster" if max(ratios) < 1 else "mixed: no verdict"
        )
        cited = " ".join(f"#{r}" for r, _, _ in a[level] + b[level])
        lines.append(
            f"| {level} | {', '.join(f'{x:.1f}' for x in per_a)} | {', '.join(f'{y:.1f}' for y in per_b)} | "
            f"{total:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | {verdict} | {cited} |"
        )
    return "\n\n" + "\n".join(lines) + "\n\n"


FIRST_SWEEP_GOAL = 0.05  # issue 66: a server's first sweep within 5% of its second, at every level


def first_sweep(fig, args: str) -> str:
    """ARGS: ``FIRST_RUNS SECOND_RUNS``, the level runs of a server's first sweep and of its second (same levels,
    same variants, the second's prompts cold too): per level and setting, the first's throughput over the second's
    with its interval (paired where the blocks sent the same prompts), and the goal's verdict: met where the
    interval lies within 5% of 1, missed where it lies wholly outside, else inside its noise."""
    first, second = args.split()
    by_level: dict[object, list[int]] = defaultdict(list)
    for run_id in run_ids(first) + run_ids(second):
        by_level[(fig.run(run_id).config or {}).get("level")].append(run_id)
    if any(len(pair) != 2 for pair in by_level.values()):
        raise PhoenixError(f"first-sweep: {first} and {second} must hold each level once")
    lines = [
        "| load | setting | first sweep tok/s | second tok/s | first / second (95% CI) | goal: within 5% | runs |",
        "|---|---|---:|---:|---|---|---|",
    ]
    for level, (a, b) in sorted(by_level.items(), key=lambda item: float(str(item[0] or 0))):
        runs = {a: fig.run(a), b: fig.run(b)}
        figs_a, figs_b = ((runs[r].config or {}).get("figures") or {} for r in (a, b))
        for variant in [v for v in figs_a if v in figs_b]:
            x, y = figs_a[variant]["output_throughput"], figs_b[variant]["output_throughput"]
            found, _ = S.between_runs(runs, (a, variant), (b, variant))
            lo, hi = 1 - FIRST_SWEEP_GOAL, 1 + FIRST_SWEEP_GOAL
            if found is None:
                interval, verdict = "no interval", "cannot tell"
            else:
                interval = f"{found[1]:.2f}-{found[2]:.2f}"
                inside, outside = lo <= found[1] and found[2] <= hi, found[2] < lo or found[1] > hi
                verdict = "met" if inside else "missed" if outside else "inside its noise"
            ratio = x / y if y else float("nan")
            lines.append(
                f"| c={level} | {variant} | {x:.1f} | {y:.1f} | {ratio:.2f}x ({interval}) | {verdict} | #{a}, #{b} |"
            )
    return "\n\n" + "\n".join(lines) + "\n\n"
