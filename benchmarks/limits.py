"""The hardware floor of a decode step, measured in the same process as the step itself.

A decode step must read every weight once, so its floor is weight bytes / streaming bandwidth. For each dtype this
measures, side by side:

- the streaming read bandwidth (a matrix-vector product over a matrix far larger than the caches);
- the matmul throughput (a square matmul, GFLOP/s);
- the target's weight bytes and the ideal step time (bytes / bandwidth);
- the target's eager step (one token on a cache that holds a prompt) and its verify cost V(n) = verify(n) / step
  for n = 1 .. k_max + 1, on the growing cache and on the static one;
- with ``--compile``, the same on the compiled forward (compile time reported apart, warmed before timing).

Each figure is the median of ``--reps`` timings with its IQR. The result goes to benchmarks/results/limits-*.json,
which ``python -m benchmarks.report`` puts in docs/results.md.

    python -m benchmarks.limits [--target smollm2] [--dtypes float32,bfloat16] [--k-max 8] [--compile]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import engine  # noqa: F401  (threads and offline settings before torch loads)
from benchmarks.common import RESULTS, spread, write

STREAM_BYTES = 512 * 2**20  # far beyond any cache: a read of it is a read from memory


def timed(fn, reps: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def bandwidth(dtype, reps: int, stream_bytes: int = STREAM_BYTES) -> dict:
    """Streaming read bandwidth, GB/s: a matrix-vector product reads the matrix once."""
    import torch

    cols = 4096
    rows = stream_bytes // (cols * torch.tensor([], dtype=dtype).element_size())
    w, x = torch.randn(rows, cols).to(dtype), torch.randn(cols).to(dtype)
    seconds = timed(lambda: torch.mv(w, x), reps)
    nbytes = w.numel() * w.element_size()
    return {"bytes": nbytes, "seconds": spread(seconds), "gb_per_s": spread([nbytes / s / 1e9 for s in seconds])}


def matmul(dtype, reps: int, n: int = 1024) -> dict:
    import torch

    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    seconds = timed(lambda: a @ b, reps)
    return {"n": n, "gflop_per_s": spread([2 * n**3 / s / 1e9 for s in seconds])}


def weight_bytes(model) -> int:
    """Every distinct parameter once: tied embeddings are read once per step (by the output layer)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def step_costs(model, cache_factory, context: int, k_max: int, reps: int) -> dict:
    """The median time of a forward over n tokens on a cache holding ``context`` tokens, n = 1 .. k_max + 1."""
    import torch

    out = {}
    with torch.inference_mode():
        cache = cache_factory()
        model(input_ids=torch.randint(0, 100, (1, context)), cache=cache, use_cache=True, logits_to_keep=1)
        for n in range(1, k_max + 2):
            ids = torch.randint(0, 100, (1, n))

            def one(ids=ids, n=n):
                model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=n)
                cache.crop(-n)

            out[n] = spread(timed(one, reps))
    return out


def measure_dtype(
    target: str, dtype_name: str, k_max: int, reps: int, context: int, compile_: bool, stream_bytes: int = STREAM_BYTES
) -> dict:
    import torch
    from transformers import DynamicCache

    from engine.decode.compiled import StaticCaches, compile_models, graph_count
    from engine.decode.loading import load_pair

    dtype = getattr(torch, dtype_name)
    pair = load_pair(target, None, "cpu", dtype_name)
    model = pair.target
    bw = bandwidth(dtype, reps, stream_bytes)
    nbytes = weight_bytes(model)
    floor = nbytes / (bw["gb_per_s"]["median"] * 1e9)
    caches = StaticCaches()
    positions = context + k_max + 2
    eager = step_costs(model, lambda: DynamicCache(config=model.config), context, k_max, reps)
    static = step_costs(model, lambda: caches.get(model, positions), context, k_max, reps)
    result = {
        "dtype": dtype_name,
        "bandwidth": bw,
        "matmul": matmul(dtype, reps),
        "weight_bytes": nbytes,
        "floor_step_s": floor,
        "eager": _costs(eager, floor),
        "static": _costs(static, floor),
    }
    if compile_:
        wrapped, stats = compile_models([model], caches, k_max + 1, positions)
        before = graph_count()
        costs = step_costs(wrapped[0], lambda: caches.get(wrapped[0], positions), context, k_max, reps)
        result["compiled"] = {**_costs(costs, floor), "compile": {**vars(stats), "recompiles": graph_count() - before}}
        result["compiled_over_eager"] = eager[1]["median"] / costs[1]["median"]
    return result


def _costs(costs: dict, floor: float) -> dict:
    step = costs[1]["median"]
    return {
        "step_s": costs[1],
        "step_over_floor": step / floor,
        "verify_over_step": {n: c["median"] / step for n, c in costs.items()},
    }


def markdown(result: dict) -> str:
    rows = [
        "| dtype | bandwidth GB/s | matmul GFLOP/s | weights MB | floor ms | engine | step ms | step / floor | "
        "V(5) | V(k_max+1) |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in result["dtypes"]:
        for engine_name in ("eager", "static", "compiled"):
            e = r.get(engine_name)
            if not e:
                continue
            v = e["verify_over_step"]
            last = max(v, key=int)
            rows.append(
                f"| {r['dtype']} | {r['bandwidth']['gb_per_s']['median']:.1f} | "
                f"{r['matmul']['gflop_per_s']['median']:.0f} | {r['weight_bytes'] / 1e6:.0f} | "
                f"{r['floor_step_s'] * 1e3:.1f} | {engine_name} | {e['step_s']['median'] * 1e3:.1f} | "
                f"{e['step_over_floor']:.2f} | {v.get(5, v.get('5', float('nan'))):.2f} | "
                f"{v[last]:.2f} (n={last}) |"
            )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--k-max", type=int, default=8)
    ap.add_argument("--context", type=int, default=200, help="tokens already in the cache when a step is timed")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--compile", action="store_true", help="also time the compiled forward (minutes of compiling)")
    ap.add_argument("--stream-mb", type=int, default=STREAM_BYTES // 2**20, help="size of the bandwidth probe's matrix")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    dtypes = [
        measure_dtype(args.target, d.strip(), args.k_max, args.reps, args.context, args.compile, args.stream_mb * 2**20)
        for d in args.dtypes.split(",")
        if d.strip()
    ]
    result = {"settings": vars(args), "dtypes": dtypes}
    path = write("limits", result, Path(args.out))
    print(markdown(result))
    print(f"written to {path}")
    return result


if __name__ == "__main__":
    main()
