"""Where a batched decode step's time goes (issue 66): one verify pass of B rows, one token each, over cached
contexts of the lengths a cold sitting gives (rows of unequal length pad the batch cache to the longest), under
torch.profiler; the top operators by self time, and the step's median against rows of equal length.

    python -m benchmarks.profile_step [--target smollm2] [--rows 1,4,8,16] [--context 450-800] [--dtype bfloat16]
        [--runner compiled] [--compare served,per-op,onednn --rounds 6]

``--compare`` times the same ragged step under each named path instead, interleaved round by round (each round in
another order, so a host whose read rate drifts charges every path alike): ``served`` the server's (the layer
blocks and the extension's GEMM up to each weight's cut measured on this CPU), ``extension`` both up to
LINEAR_ROWS whatever was measured, ``per-op`` the blocks off, ``onednn`` the extension's GEMM off too (oneDNN takes
every linear layer; attention stays the kernel's). A change to the step, or the cut a CPU measured
(engine.decode.cuts), is judged by these medians side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import random
import statistics
import time

import torch
from transformers import DynamicCache

import engine  # noqa: F401
from engine.decode import fast_attention
from engine.decode.batch import BatchCache, roomy_cache, verify_batch
from engine.decode.loading import load_pair, prepare


def rows_cache(target, lengths: list[int]) -> BatchCache:
    batch = BatchCache.empty(target.device)
    cached: dict[int, DynamicCache] = {}  # one prefill per length, copied per row
    with torch.inference_mode():
        for n in lengths:
            if n not in cached:
                cache = roomy_cache(target.config)  # the server's: a step's tokens written in place
                target(input_ids=torch.arange(1, n + 1)[None, :] % 1000 + 1, cache=cache, use_cache=True)
                cached[n] = cache
            batch.add_row(copy.deepcopy(cached[n]), n)
    return batch


def step_s(target, batch: BatchCache, repeat: int) -> list[float]:
    out = []
    with torch.inference_mode():
        for _ in range(repeat):
            lengths = list(batch.lengths)
            start = time.perf_counter()
            verify_batch(target, batch, [[1] for _ in lengths])
            out.append(time.perf_counter() - start)
            batch.cache.crop(-1)
            batch.valid, batch.lengths = batch.valid[:, :-1], lengths
    return out


PATHS = ("served", "extension", "per-op", "onednn")


@contextlib.contextmanager
def path(target, name: str):
    """The step under one of PATHS for the duration (module settings restored after, whatever happened)."""
    if name not in PATHS:
        raise SystemExit(f"--compare: unknown path {name!r}; choose from {', '.join(PATHS)}")
    had, rows, cuts = "_blocks" in target.__dict__, fast_attention.LINEAR_ROWS, fast_attention._cuts
    kept = target.__dict__.get("_blocks")
    if name in ("per-op", "onednn"):
        target.__dict__["_blocks"] = []  # blocks() reads [] as "none here": every layer per op
    if name == "extension":
        fast_attention._cuts = {}  # none measured: the extension's GEMM and the blocks up to LINEAR_ROWS
    if name == "onednn":
        fast_attention.LINEAR_ROWS = 0  # linear() and blocks() take no call; buckets as without the extension
    try:
        yield
    finally:
        fast_attention.LINEAR_ROWS, fast_attention._cuts = rows, cuts
        if had:
            target.__dict__["_blocks"] = kept
        else:
            target.__dict__.pop("_blocks", None)


def compare(target, batch: BatchCache, names: list[str], rounds: int, repeat: int) -> dict[str, list[float]]:
    """Each path's median step, one per round, the paths taken in a rotated order each round."""
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            with path(target, name):
                step_s(target, batch, 2)  # the first steps of a path build what it builds
                out[name].append(statistics.median(step_s(target, batch, repeat)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rows", default="1,4,8,16")
    ap.add_argument("--context", default="450-800")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--runner", default="auto")  # auto | phoenix | compiled | transformers
    ap.add_argument("--compare", default="")  # paths of PATHS, comma-separated: timed side by side, no profile
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    pair = prepare(load_pair(args.target, None, "cpu", args.dtype), runner=args.runner)
    target = pair.target
    lo, hi = map(int, args.context.split("-"))
    rng = random.Random(0)
    for b in map(int, args.rows.split(",")):
        lengths = sorted(rng.randint(lo, hi) for _ in range(b))
        ragged = rows_cache(target, lengths)
        if args.compare:
            times = compare(target, ragged, args.compare.split(","), args.rounds, args.repeat)
            said = ", ".join(f"{n} {1000 * statistics.median(t):.1f} ms ({1000 * min(t):.1f}-{1000 * max(t):.1f})"
                             for n, t in times.items())  # fmt: skip
            print(f"{b} rows, contexts {lengths[0]}-{lengths[-1]}, median of {args.rounds} rounds: {said}", flush=True)
            continue
        even = rows_cache(target, [max(lengths)] * b)
        step_s(target, ragged, 3)
        t_ragged, t_even = statistics.median(step_s(target, ragged, args.repeat)), 0.0
        t_even = statistics.median(step_s(target, even, args.repeat))
        print(f"\n{b} rows, contexts {lengths[0]}-{lengths[-1]}: step {1000 * t_ragged:.1f} ms ragged, "
              f"{1000 * t_even:.1f} ms all at {lengths[-1]}")  # fmt: skip
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step_s(target, ragged, 5)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
