"""A served step's cost by batch, from the server's own step records (``serve_steps``): the pure decode step, one
token a row (width 1) and no prompt chunk beside it, is what a batch of B rows costs on the forward path that
served; its growth from 1 row to many is what separates one engine's step from another's at load (vLLM's TPOT is
nearly flat from 1 to 8 rows on these CPUs; issue 66)."""

from __future__ import annotations

import statistics

import pandas as pd

BATCHES = (1, 2, 4, 8, 16)


def pure_steps(frame: pd.DataFrame) -> dict[int, tuple[float, int]]:
    """Per batch size: the median seconds of its pure decode steps and how many there were."""
    if frame.empty:
        return {}
    pure = frame[(frame["width"] == 1) & (frame["prefill_tokens"] == 0)]
    return {
        int(b): (statistics.median(group["verify_s"].tolist()), len(group))
        for b, group in pure.groupby("batch")
        if len(group)
    }


def growth(steps: dict[int, tuple[float, int]], rows: int = 16) -> float | None:
    """A ``rows``-row step's cost over a one-row step's; None where either was not served."""
    if 1 not in steps or rows not in steps:
        return None
    return steps[rows][0] / steps[1][0]
