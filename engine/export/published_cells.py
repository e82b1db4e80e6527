"""What every generated table shares: a lab cell (the median per-prompt speedup over target-only with its 95%
interval, vLLM's mean acceptance length, outputs identical to target-only) and results.md's link anchors."""

from __future__ import annotations

import re


def cell(fig, run_id: int, mode: str) -> str:
    m = fig.mode(run_id, mode)
    sp = m.speedup
    ci = f"{sp.low:.2f}-{sp.high:.2f}" if sp.low is not None else "no interval"
    mal = f"{m.mean_acceptance_length:.2f}" if m.mean_acceptance_length is not None else "n/a"
    return f"{sp.median:.2f}x ({ci}), {mal}, {m.identical_n}/{m.checked_n}"


def anchor(heading: str) -> str:
    """A results.md heading's link anchor, as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
