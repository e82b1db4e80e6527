"""Answer quality with speculation on against off (the ``quality`` block of engine.export.published): per group of
lm-eval runs through one server (the first, speculation off, the baseline), each drafter's pass@1, how many of its
answers are identical to the baseline's, and the paired difference with its 95% interval (engine.analysis.quality).
"Equal" only where every answer is identical; otherwise the interval says whether the score moved."""

from __future__ import annotations

from engine.analysis.quality import diff_of
from engine.errors import PhoenixError
from engine.export.run_ids import run_ids


def quality(fig, args: str) -> str:
    """ARGS: groups ``BASE:OTHERS`` separated by spaces, runs as elsewhere (``418:419-421 422:423``)."""
    lines = [
        "| server | drafter | pass@1 | answers identical to off | difference (95% interval) | verdict | run |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for group in args.split():
        base_text, _, others = group.partition(":")
        (base,) = run_ids(base_text)
        first = fig.run(base)
        for other in [base, *run_ids(others)]:
            info = fig.run(other)
            q = (info.config or {}).get("quality")
            if not isinstance(q, dict):
                raise PhoenixError(f"run #{other} is not a quality run (lm-eval)")
            score = next(iter(q["scores"].values())).get("pass_at_1")
            server = info.name.split(": ", 1)[-1].rsplit(", drafter", 1)[0]
            if other == base:
                lines.append(f"| {server} | {q['drafter']} | {score:.3f} | (baseline) | | | #{other} |")
                continue
            d = diff_of(fig.store, base, other)
            if d is None:
                raise PhoenixError(f"runs #{base} and #{other} share no scored document")
            same = d.identical == d.documents
            verdict = "equal" if same else ("moved" if d.low > 0 or d.high < 0 else "tied (interval holds 0)")
            lines.append(
                f"| {server} | {q['drafter']} | {score:.3f} | {d.identical}/{d.documents} | {d.diff:+.3f} "
                f"({d.low:+.3f}..{d.high:+.3f}) | {verdict} | #{other} vs #{first.id} |"
            )
    return "\n\n" + "\n".join(lines) + "\n\n"
