"""Where the time goes: our loop against transformers' assisted generation at equal k,
under torch.profiler, on the same held-out prompts.

Reports, per engine, wall time, time inside model forwards (target and draft), and
the rest (Python, cache bookkeeping, candidate handling), plus the top operators.

    python -m benchmarks.profile_decode [--limit 3] [--k 4] [--max-new-tokens 96]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import engine  # noqa: F401
from benchmarks.common import write
from engine.decode.decoder import Decoder
from engine.decode.loading import load_pair
from engine.prompts.sets import load as load_prompts


def forward_seconds(model, fn) -> tuple[float, float]:
    """(wall seconds of fn, seconds spent inside model.forward), measured with a forward hook pair."""
    spent = [0.0]
    start = {}

    def pre(_m, _a, _kw):
        start["t"] = time.perf_counter()

    def post(_m, _a, _kw, _out):
        spent[0] += time.perf_counter() - start.pop("t")

    h1 = model.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = model.register_forward_hook(post, with_kwargs=True)
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0, spent[0]
    finally:
        h1.remove()
        h2.remove()


def main(argv=None) -> dict:
    from torch.profiler import ProfilerActivity, profile

    p = argparse.ArgumentParser()
    p.add_argument("--limit", type=int, default=3)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--target", default="embedded")
    p.add_argument("--draft", default="embedded")
    p.add_argument("--prompts", default="humaneval-test")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    dec = Decoder(load_pair(args.target, args.draft, "cpu", "float32"))
    ids = [dec.encode(q.text) for q in load_prompts(args.prompts, args.limit)]
    for name in ("phoenix", "hf"):
        dec.run(ids[0], args.k, 8, "model", name)  # warm-up
    result = {"settings": vars(args), "engines": {}}
    for name in ("phoenix", "hf"):

        def run(name=name):
            return [dec.run(x, args.k, args.max_new_tokens, "model", name) for x in ids]

        wall, in_target = forward_seconds(dec.pair.target, run)
        _, in_draft = forward_seconds(dec.pair.draft, run)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        top = [
            {"op": e.key, "self_cpu_ms": e.self_cpu_time_total / 1e3, "calls": e.count}
            for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:8]
        ]
        result["engines"][name] = {
            "wall_s": wall,
            "target_forward_s": in_target,
            "draft_forward_s": in_draft,
            "outside_forwards_share": max(0.0, 1 - (in_target + in_draft) / wall) if wall else None,
            "top_ops": top,
        }
        b = result["engines"][name]
        print(
            f"{name:>7}: wall {wall:.2f} s, target forwards {in_target:.2f} s, draft forwards {in_draft:.2f} s, "
            f"outside forwards {b['outside_forwards_share']:.0%}"
        )
        for t in top[:5]:
            print(f"        {t['op']:<40}{t['self_cpu_ms']:>10.1f} ms{t['calls']:>8}")
    path = write("profile_decode", result, Path(args.out)) if args.out else write("profile_decode", result)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
