"""A load level's work through the engine core alone (issue 66): ``n`` cold prompts at ``c`` in flight, each kept
full as requests finish (a closed loop, as ``engines load`` sends them), every prompt new to the scheduler, with
no HTTP, tokenizer or recorder in the way; the wall time, output tok/s, and where the steps' time went (decode
passes against the rest). ``--budget 512,2048`` alternates the step's token budgets wave by wave, ``--mix on,off``
prompts' chunks in the verify's forward or in forwards of their own (engine.decode.mixed), ``--tokens 16-112`` each
request's own output length (requests then finish, and prompts arrive, at scattered steps); run it on a quiet
machine (with the allocator the server runs with: LD_PRELOAD of tcmalloc), and compare two commits interleaved (a
worktree each).

    PYTHONPATH=. python -m benchmarks.profile_wave [--target smollm2] [--concurrency 16] [--n 16] [--tokens 64]
        [--prompt-tokens 140-180] [--repeat 3] [--max-batch 16] [--budget 512,2048] [--mix on,off]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

import engine  # noqa: F401
from engine.decode.config import BUDGET
from engine.decode.decoder import Decoder
from engine.decode.loading import load_pair, prepare
from engine.decode.scheduler import Scheduler
from engine.decode.sequence import Request
from engine.serve.tuner import LoadTuner


def wave(dec: Decoder, args, seed: int, budget: int, drafter: str, mix: bool) -> tuple[float, int, float]:
    """One level: (wall seconds, output tokens, seconds in decode passes)."""
    rng = random.Random(seed)
    lo, hi = map(int, args.prompt_tokens.split("-"))
    vocab = dec.pair.target.config.vocab_size
    prompts = [[rng.randrange(100, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(args.n)]
    short, long = map(int, (args.tokens + "-" + args.tokens).split("-")[:2])
    lengths = [rng.randint(short, long) for _ in range(args.n)]
    tuner = args.tuners.setdefault(drafter, LoadTuner(args.k_max)) if args.k == "auto" else None  # learns across waves
    sched = Scheduler(
        dec.pair.target, dec.row_drafter, dec.eos_id, tuner, max_batch=args.max_batch, budget=budget, mix=mix
    )
    done: list[object] = []
    k = None if args.k == "auto" else int(args.k)  # auto: the server's tuner chooses (its costs learnt online)
    queue = [Request(p, t, drafter, k=k, ignore_eos=True, id=str(j)) for j, (p, t) in enumerate(zip(prompts, lengths))]
    for r in queue:
        r.on_done = done.append
    sent = 0
    start = time.perf_counter()
    while len(done) < args.n:
        while sent < args.n and sent - len(done) < args.concurrency:
            sched.submit(queue[sent])
            sent += 1
        sched.step()
    wall = time.perf_counter() - start
    decode_s = sum(s.verify_s + s.draft_s for s in sched.steps)
    return wall, sum(f.stats.output_tokens for f in done), decode_s  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--tokens", default="64", help="each request's output tokens, or a range to draw from: 16-112")
    ap.add_argument("--prompt-tokens", default="140-180")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--budget", default=str(BUDGET), help="the step's token budgets to alternate, e.g. 512,2048")
    ap.add_argument("--draft", default=None, help="a draft model or head for --drafters (e.g. smollm2-eagle3)")
    ap.add_argument("--drafters", default="none", help="the rows' drafters to alternate, e.g. none,eagle3")
    ap.add_argument("--k", default="0", help="the drafting rows' k (0: rows that could draft and do not; auto: tuned)")
    ap.add_argument("--mix", default="on", help="prompts' chunks in the verify's forward: on, off, or on,off")
    ap.add_argument("--k-max", type=int, default=4, help="the tuner's widest k (with --k auto)")
    args = ap.parse_args()
    args.tuners = {}
    dec = Decoder(prepare(load_pair(args.target, args.draft, "cpu", args.dtype)))
    settings = [
        (int(b), d, m == "on")
        for b in args.budget.split(",")
        for d in args.drafters.split(",")
        for m in args.mix.split(",")
    ]
    with torch.inference_mode():
        for budget, drafter, mix in settings:
            wave(dec, args, 99, budget, drafter, mix)  # builds every GEMM shape once
        rates: dict[tuple[int, str, bool], list[float]] = {s: [] for s in settings}
        for i in range(args.repeat):
            for budget, drafter, mix in settings:  # interleaved: a machine's drift reaches every setting alike
                wall, tokens, decode_s = wave(dec, args, i, budget, drafter, mix)
                rates[(budget, drafter, mix)].append(tokens / wall)
                print(f"wave {i}, budget {budget}, {drafter}, mix {mix}: {wall:.2f} s, {tokens / wall:.1f} output "
                      f"tok/s, decode passes {decode_s / wall:.0%} of it", flush=True)  # fmt: skip
    for (budget, drafter, mix), r in rates.items():
        print(f"budget {budget}, {drafter}, mix {mix}: median {statistics.median(r):.1f} tok/s "
              f"({min(r):.1f}-{max(r):.1f}), c={args.concurrency}, n={args.n}, {args.tokens} tokens, "
              f"{args.dtype}")  # fmt: skip


if __name__ == "__main__":
    main()
