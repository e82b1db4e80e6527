"""Two settings of one server measured in alternating rounds (the ``rounds`` block of engine.export.published):
per level, each setting's output tok/s round by round, and the ratio of their totals with the range of the
per-round ratios. A "faster" needs every round to agree; otherwise the rounds are the noise and it says "mixed"."""

from __future__ import annotations

from collections import defaultdict

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
