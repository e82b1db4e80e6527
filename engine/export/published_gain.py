"""A drafter's acceptance gain at one position, paired by prompt (the ``position-gain`` block of
engine.export.published; the figure and interval from engine.analysis.position_gain)."""

from __future__ import annotations

from engine.analysis.position_gain import of_runs
from engine.errors import PhoenixError


def position_gain(fig, args: str) -> str:
    """ARGS: ``BASE:MODE OTHER:MODE GOAL [POSITION]`` (``501:eagle3_3 503:eagle3_3 0.05``); GOAL ``-``: no goal,
    the change and its interval alone (a cost measured elsewhere, say)."""
    parts = args.split()
    if len(parts) not in (3, 4):
        raise PhoenixError("position-gain takes BASE:MODE OTHER:MODE GOAL [POSITION]")
    (base, base_mode), (other, other_mode) = ((int(r), m) for r, _, m in (p.partition(":") for p in parts[:2]))
    goal, position = (None if parts[2] == "-" else float(parts[2])), int(parts[3]) if len(parts) == 4 else 0
    for run_id in (base, other):
        fig.run(run_id)  # both cited runs exist, or one line says which does not
    g = of_runs(fig.store, (base, base_mode), (other, other_mode), position)
    if g is None:
        raise PhoenixError(f"runs #{base} and #{other} share fewer than two prompts drafted at position {position}")
    said = (
        f"position-{position} acceptance {g.base:.3f} (#{base}, {g.proposed[0]} drafts) -> {g.other:.3f} "
        f"(#{other}, {g.proposed[1]} drafts) on the same {g.prompts} prompts: {g.diff:+.3f}, 95% interval "
        f"{g.low:+.3f}..{g.high:+.3f} (paired bootstrap over prompts)"
    )
    return said if goal is None else f"{said}; goal +{goal:g}: **{g.verdict(goal)}**"
