"""Replay a server's steps through the tuner's cost model: how far each cell's first estimate (a cell no forward had
measured yet, so interpolated) lay from what that forward then took, with the model's rule for a missing cell and
with the rule before it (interpolation along the batch through every batch's own row of cells, where a batch
measured only at 2 tokens lent that cost to its 1-token forward: runs #1042, #1046).

    PYTHONPATH=. python -m benchmarks.replay_cost --db sqlite:///benchmarks/results.db 1042 1046

Reads the server run's start-up profile (``cost_profile``) and its ``serve_steps`` in order; a step with a
prompt's chunk in its forward is left out, as the server leaves it out of its cost cells. Prints, per run and
rule, the cells estimated before their first measurement, the mean log error (above 0: dearer than measured) and
the median absolute log error."""

from __future__ import annotations

import argparse
import math
import statistics

from engine.measure import StepRecord
from engine.serve.tuner import CostModel, _interp


def before_fix(model: CostModel, b: int, n: int) -> float:
    """The missing-cell rule before the fix: every batch's row, whatever its narrowest measured width."""
    if (b, n) in model.cells:
        return model.now(b, n)
    bs = sorted({cb for cb, _ in model.cells})
    return _interp(bs, b, lambda cb: model._at_n(cb, n))


def replay(profile: list[dict], steps: list[StepRecord]) -> dict[str, list[float]]:
    model = CostModel.from_rows(profile)
    errors: dict[str, list[float]] = {"before the fix": [], "now": []}
    for step in steps:
        if step.prefill_tokens or step.verify_s <= 0:
            continue
        b, n, seconds = step.batch, step.width, step.verify_s
        if (b, n) not in model.cells:
            errors["before the fix"].append(math.log(before_fix(model, b, n) / seconds))
            errors["now"].append(math.log(model.seconds(b, n) / seconds))
        model.observe(b, n, seconds)
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=int, help="server runs (their serve_steps and cost profile)")
    parser.add_argument("--db", default="sqlite:///benchmarks/results.db")
    args = parser.parse_args()
    from db.store import Store

    store = Store(args.db)
    for run_id in args.runs:
        run = store.get_run(run_id)
        profile = (run.config or {}).get("cost_profile") if run is not None else None
        if not profile:
            print(f"run {run_id}: no cost profile stored (not a server run with --profile)")
            continue
        for rule, errs in replay(profile, store.serve_steps(run_id)).items():
            if errs:
                print(
                    f"run {run_id}, {rule}: {len(errs)} cells estimated before their first forward, mean log error "
                    f"{statistics.fmean(errs):+.3f}, median |log error| {statistics.median(abs(e) for e in errs):.3f}"
                )


if __name__ == "__main__":
    main()
