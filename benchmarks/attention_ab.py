"""The decode attention kernel against SDPA, step by step (issue 66): one verify pass of B rows, one token each,
over cached contexts built as benchmarks.profile_step builds them, the two alternating in four rounds in one
process; the median step of each and their ratio. Run it on a quiet machine.

    python -m benchmarks.attention_ab [--target smollm2] [--rows 1,2,4,8,16] [--contexts 150-350,450-800]
"""

from __future__ import annotations

import argparse
import random
import statistics

import engine  # noqa: F401
from benchmarks.profile_step import rows_cache, step_s
from engine.decode import fast_attention
from engine.decode.loading import load_pair, prepare


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--contexts", default="150-350,450-800")
    args = ap.parse_args()
    target = prepare(load_pair(args.target, None, "cpu", "bfloat16"), runner="auto").target
    op = fast_attention.kernel()
    if op is None:
        raise SystemExit(fast_attention.describe())
    for span in args.contexts.split(","):
        lo, hi = map(int, span.split("-"))
        for b in map(int, args.rows.split(",")):
            rng = random.Random(b)
            batch = rows_cache(target, sorted(rng.randint(lo, hi) for _ in range(b)))
            steps: dict[str, list[float]] = {"sdpa": [], "kernel": []}
            for turn in range(4):
                for name in ("sdpa", "kernel") if turn % 2 == 0 else ("kernel", "sdpa"):
                    fast_attention._state.update(op=op if name == "kernel" else None, why="off for the A/B")
                    step_s(target, batch, 2)
                    steps[name].append(statistics.median(step_s(target, batch, 10)))
            a, m = statistics.median(steps["sdpa"]), statistics.median(steps["kernel"])
            print(f"contexts {lo}-{hi}, {b} rows: SDPA {1000 * a:.1f} ms, kernel {1000 * m:.1f} ms, "
                  f"kernel / SDPA {m / a:.3f}", flush=True)  # fmt: skip
    fast_attention._state.update(op=op, why=None)


if __name__ == "__main__":
    main()
