"""``step-cost RUNS``: each Phoenix server run's pure decode step by batch (engine.analysis.step_cost), from its own
step records: what a step of 1 to 16 rows cost on the path that served, and the 16-row step over the one-row."""

from __future__ import annotations

from engine.analysis.step_cost import BATCHES, growth, pure_steps
from engine.errors import PhoenixError
from engine.export.run_ids import run_ids


def step_cost(fig, args: str) -> str:
    head = "| server run | " + " | ".join(f"{b} row{'s' if b > 1 else ''}: ms (steps)" for b in BATCHES)
    lines = [head + " | 16 rows / 1 row |", "|---" * (len(BATCHES) + 2) + "|"]
    for run_id in run_ids(args):
        run = fig.run(run_id)
        if not isinstance((run.config or {}).get("phoenix_serve"), dict):
            raise PhoenixError(f"step-cost: run #{run_id} is not a Phoenix server run (its steps are its server's)")
        steps = pure_steps(fig.store.serve_steps_frame(run_id))
        cells = [f"{steps[b][0] * 1e3:.1f} ({steps[b][1]})" if b in steps else "not served" for b in BATCHES]
        ratio = growth(steps)
        lines.append(f"| #{run_id} | " + " | ".join(cells) + f" | {f'{ratio:.2f}x' if ratio else 'n/a'} |")
    return "\n" + "\n".join(lines) + "\n"
