"""The hardware floor of a decode step and the cost of every forward width, measured in one process per path.

A decode step must read every weight once, so its floor is weight bytes / streaming bandwidth. For each dtype this
measures, side by side:

- the streaming read bandwidth (a matrix-vector product over a matrix far larger than the caches);
- the matmul throughput (a square matmul, GFLOP/s);
- the target's weight bytes and the ideal step time (bytes / bandwidth);
- on every path (``eager``: a growing cache; ``static``: a preallocated one; with ``--compile``, ``compiled``
  and ``frozen``, torch.compile without and with the weights frozen into the graphs): the step (one token on a
  cache holding a prompt), V(n) = forward(n) / step for n = 1 .. k_max + 1, and a forward over B rows of n tokens
  for B in ``--batches`` and n in ``--batch-widths``, in the same path's single steps. Compile time and the graphs
  each path added are reported apart; every shape is run before its clock starts.

Each figure is the median of ``--reps`` timings with its IQR. The file names the CPU (model, family, speed flags)
and torch: `python -m engine bench --fast` reads the newest file measured on the same CPU to pick its path, and
``python -m benchmarks.report`` puts the newest one in docs/results.md.

    python -m benchmarks.limits [--target smollm2] [--dtypes float32,bfloat16] [--k-max 8] [--compile]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import engine  # noqa: F401  (threads and offline settings before torch loads)
from benchmarks.common import RESULTS, spread, write

STREAM_BYTES = 512 * 2**20  # far beyond any cache: a read of it is a read from memory
BATCHES = "1,2,4,8,16"  # rows a batched forward carries (Phoenix serves up to 16 at once)
GOALS = {  # issue 37's goals, per dtype: step / floor, V(n) at the named width, 8 rows x 5 tokens in steps
    "float32": {"step_over_floor": 1.3, "V": (5, 1.15), "rows_8_by_5": 2.0},
    "bfloat16": {"step_over_floor": 1.5, "V": (9, 1.1), "rows_8_by_5": 1.4},
}


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
    """Streaming read bandwidth, GB/s, two ways: a matrix-vector product in ``dtype`` (what a decode step's kernels
    reach) and a plain fp32 sum (what the memory gives; on a 2-core AMD EPYC 39.7 GB/s against mv's 15.9)."""
    import torch

    cols = 4096
    rows = stream_bytes // (cols * torch.tensor([], dtype=dtype).element_size())
    w, x = torch.randn(rows, cols).to(dtype), torch.randn(cols).to(dtype)
    seconds = timed(lambda: torch.mv(w, x), reps)
    nbytes = w.numel() * w.element_size()
    flat = torch.randn(stream_bytes // 4)
    summed = timed(lambda: flat.sum(), reps)
    return {
        "bytes": nbytes,
        "seconds": spread(seconds),
        "gb_per_s": spread([nbytes / s / 1e9 for s in seconds]),
        "read_gb_per_s": spread([flat.numel() * 4 / s / 1e9 for s in summed]),
    }


def stream_rate(bw: dict) -> float:
    """The floor's bandwidth: the fastest streaming read measured (memory bandwidth is the memory's, not a
    kernel's: a bf16 mv that streams slower than an fp32 sum would put the floor above the step)."""
    return max(bw["gb_per_s"]["median"], bw.get("read_gb_per_s", {}).get("median") or 0.0)


def matmul(dtype, reps: int, n: int = 1024) -> dict:
    import torch

    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    seconds = timed(lambda: a @ b, reps)
    return {"n": n, "gflop_per_s": spread([2 * n**3 / s / 1e9 for s in seconds])}


def weight_bytes(model) -> int:
    """The bytes a one-token step reads: every distinct parameter once (tied embeddings are read once, by the
    output layer), less an untied input embedding, of which a step reads one row (Qwen2.5-Coder-1.5B's is 467 MB
    in bf16, an eighth of its weights)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    embed, out = model.get_input_embeddings(), model.get_output_embeddings()
    if embed is not None and (out is None or out.weight.data_ptr() != embed.weight.data_ptr()):
        rows, size = embed.weight.shape[0], embed.weight[0].numel() * embed.weight.element_size()
        total -= (rows - 1) * size
    return total


def read_rate(reps: int, stream_bytes: int = STREAM_BYTES) -> float:
    """The memory's streaming read, GB/s: the faster of two reads of ``stream_bytes`` (medians of ``reps``), an fp32
    sum and a bf16 matrix-vector product. Taken again beside each path's steps, since a shared host's bandwidth
    drifts within minutes (27.5 against 38.5 GB/s on one 2-core AMD EPYC). Neither read is the memory's on every
    CPU: on a 2-core Xeon with AMX the sum read 20 GB/s and the mv 28 (the same at 256 MB and at 2 GB, so neither
    was a cache), and a floor from the sum alone sat above the 1.5B's own step (step / floor 0.76-0.96)."""
    import torch

    def rate(run, nbytes: int) -> float:
        return spread([nbytes / s / 1e9 for s in timed(run, reps)])["median"]

    flat = torch.randn(stream_bytes // 4)
    summed = rate(flat.sum, stream_bytes)
    cols = 4096
    w, x = torch.randn(stream_bytes // 2 // cols, cols).to(torch.bfloat16), torch.randn(cols).to(torch.bfloat16)
    product = rate(lambda: torch.mv(w, x), w.numel() * 2)
    return max(summed, product)


def forward_costs(model, cache_factory, context: int, widths, rows: int, reps: int) -> dict:
    """The timings of a forward over ``rows`` x n tokens on a cache holding ``context`` tokens, per n in widths.
    The widths take turns, one timing each per round, so a noisy machine's slow spell hits every width alike."""
    import torch

    widths = list(widths)
    out: dict[int, list[float]] = {n: [] for n in widths}
    with torch.inference_mode():
        cache = cache_factory(rows)
        model(input_ids=torch.randint(0, 100, (rows, context)), cache=cache, use_cache=True, logits_to_keep=1)
        ids = {n: torch.randint(0, 100, (rows, n)) for n in widths}

        def one(n: int) -> float:
            start = time.perf_counter()
            model(input_ids=ids[n], cache=cache, use_cache=True, logits_to_keep=n)
            seconds = time.perf_counter() - start
            cache.crop(-n)
            return seconds

        for _ in range(2):  # every shape once before the clock (a compiled path compiles a new row count here)
            for n in widths:
                one(n)
        for _ in range(reps):
            for n in widths:
                out[n].append(one(n))
    return {n: spread(times) for n, times in out.items()}


def measure_path(model, cache_factory, args, batch_widths, batches, single_cache=None) -> dict:
    """One path: V(n) at one row for every width, then the batched grid, in the path's own single steps; with the
    graphs each part added (0 on an eager path; at one row after the warm-up, a recompile). The step's floor is
    the path's own: its weight bytes over the read rate measured just before and just after its single steps."""
    from engine.decode.compiled import graph_count

    before, rate = graph_count(), read_rate(args.reps, args.stream_mb * 2**20)
    single = forward_costs(model, single_cache or cache_factory, args.context, range(1, args.k_max + 2), 1, args.reps)
    step, at_one_row = single[1]["median"], graph_count() - before
    rate = (rate + read_rate(args.reps, args.stream_mb * 2**20)) / 2
    floor = weight_bytes(model) / (rate * 1e9)
    grid, start = {}, time.perf_counter()
    for rows in batches:
        costs = single
        if rows > 1:
            costs = forward_costs(model, cache_factory, args.context, batch_widths, rows, args.reps)
        grid[rows] = {n: {"seconds": costs[n], "over_step": costs[n]["median"] / step} for n in batch_widths}
    return {
        "step_s": single[1],
        "read_gb_per_s": rate,
        "floor_step_s": floor,
        "step_over_floor": step / floor,
        "verify_over_step": {n: c["median"] / step for n, c in single.items()},
        "batched": grid,
        "graphs": {"one_row": at_one_row, "batched": graph_count() - before - at_one_row},
        "batched_s": time.perf_counter() - start,
    }


def compiled_path(model, args, batch_widths, batches, freeze: bool) -> dict:
    """The compiled forward (frozen weights or not): compiled and warmed for every width first (the time a run
    spends before its clock), then timed; a graph the one-row timing adds is a recompile, the batched grid's new
    row counts compile theirs in the warm-up of each cell."""
    from transformers import StaticCache

    from engine.decode.compiled import StaticCaches, compile_models

    caches, positions = StaticCaches(), args.context + args.k_max + 2
    (wrapped,), stats = compile_models([model], caches, args.k_max + 1, positions, freeze=freeze)
    if not stats.compiled:
        return {"compile": vars(stats)}

    def batched_cache(rows: int):  # a fresh static cache per row count: a cache's shape is fixed once filled
        return StaticCache(config=model.config, max_cache_len=positions)

    result = measure_path(
        wrapped, batched_cache, args, batch_widths, batches, lambda rows: caches.get(wrapped, positions)
    )
    return {**result, "compile": {**vars(stats), "recompiles": result["graphs"]["one_row"]}}


def measure_dtype(target: str, dtype_name: str, args) -> dict:
    import torch
    from transformers import DynamicCache, StaticCache

    from engine.decode.loading import load_pair

    dtype = getattr(torch, dtype_name)
    model = load_pair(target, None, "cpu", dtype_name).target
    bw = bandwidth(dtype, args.reps, args.stream_mb * 2**20)
    nbytes = weight_bytes(model)
    floor = nbytes / (stream_rate(bw) * 1e9)
    # widths past the longest verify are not a forward any run takes
    batch_widths = sorted({min(int(n), args.k_max + 1) for n in args.batch_widths.split(",") if n.strip()} | {1})
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    positions = args.context + args.k_max + 2
    factories = {
        "eager": lambda rows: DynamicCache(config=model.config),
        "static": lambda rows: StaticCache(config=model.config, max_cache_len=positions),
    }
    factories = {name: make for name, make in factories.items() if name in args.plain}
    result = {
        "dtype": dtype_name,
        "bandwidth": bw,
        "matmul": matmul(dtype, args.reps),
        "weight_bytes": nbytes,
        "floor_step_s": floor,
        **{name: measure_path(model, make, args, batch_widths, batches) for name, make in factories.items()},
    }
    if "served" in args.plain:  # the server's own forward: Phoenix's runner, its fused and packed layers
        from engine.decode.batch import roomy_cache
        from engine.decode.loading import prepare

        served = prepare(load_pair(target, None, "cpu", dtype_name)).target
        make = lambda rows: roomy_cache(served.config)  # noqa: E731
        result["served"] = measure_path(served, make, args, batch_widths, batches)
    if args.compile:
        for name, freeze in (("compiled", False), ("frozen", True)):
            if name in args.paths:
                result[name] = compiled_path(model, args, batch_widths, batches, freeze)
                torch._dynamo.reset()  # each path compiles from nothing: no graph of one serves the other
        if "frozen" in result and result["frozen"].get("step_s"):
            result["frozen_over_eager"] = result["eager"]["step_s"]["median"] / result["frozen"]["step_s"]["median"]
    return result


PATH_NAMES = ("eager", "static", "served", "compiled", "frozen")


def _v(v: dict, n: int) -> float:
    return v.get(n, v.get(str(n), float("nan")))


def _entries(result: dict):
    for r in result["dtypes"]:
        for name in PATH_NAMES:
            e = r.get(name)
            if e and e.get("step_s"):
                yield r, name, e


def goals(result: dict) -> list[str]:
    """Issue 37's goals on each dtype's fastest path (the one `--fast` takes for k = k_max: the lowest mean forward
    over 1..k_max + 1 tokens), all on that one path: a V(n) is in its own path's steps, so the best V(n) of any
    path would flatter a path whose step is slow."""
    from engine.bench.fast import forward_s

    k_max = int(result.get("settings", {}).get("k_max", 8))
    lines = []
    for r in result["dtypes"]:
        goal = GOALS.get(r["dtype"])
        timed_paths = {name: forward_s(e, k_max) for rr, name, e in _entries(result) if rr is r}
        timed_paths = {name: s for name, s in timed_paths.items() if s is not None}
        if not goal or not timed_paths:
            continue
        name = min(timed_paths, key=lambda p: timed_paths[p])
        e, (n, v_goal) = r[name], goal["V"]
        figures = [
            (f"step / floor ≤ {goal['step_over_floor']}", e["step_over_floor"], goal["step_over_floor"]),
            (f"V({n}) ≤ {v_goal}", _v(e["verify_over_step"], n), v_goal),
            (f"8 rows x 5 tokens ≤ {goal['rows_8_by_5']} steps", _cell(e, 8, 5), goal["rows_8_by_5"]),
        ]
        parts = [
            f"{text}: {value:.2f}, {'met' if value <= limit else 'missed'}"
            for text, value, limit in figures
            if value is not None and value == value  # a width the file did not measure (NaN) is not a figure
        ]
        lines.append(f"- {r['dtype']}, {name} ({timed_paths[name] * 1e3:.1f} ms a forward): " + "; ".join(parts))
    return lines


def _cell(entry: dict, rows: int, n: int) -> float | None:
    cells = (entry.get("batched") or {}).get(rows, (entry.get("batched") or {}).get(str(rows)))
    if not cells:
        return None
    cell = cells.get(n, cells.get(str(n)))
    return cell["over_step"] if cell else None


def markdown(result: dict) -> str:
    """Three tables: the step against its floor, V(n) at every width, and the batched grid."""
    prov = result.get("provenance", {})
    head = (
        f"CPU: {prov.get('cpu', '?')}, {prov.get('cores', '?')} cores, flags "
        f"{', '.join(prov.get('cpu_flags') or []) or 'none of note'}; torch {prov.get('torch', '?')}"
    )
    steps = [
        "| dtype | mv GB/s | read GB/s | matmul GFLOP/s | weights MB | floor ms | path | step ms | step / floor "
        "| compile s |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    ns = sorted({int(n) for _, _, e in _entries(result) for n in e["verify_over_step"]})
    widths = ["| dtype | path | " + " | ".join(f"V({n})" for n in ns) + " |", "|---|---|" + "---:|" * len(ns)]
    bw = sorted({int(n) for _, _, e in _entries(result) for row in (e.get("batched") or {}).values() for n in row})
    grid = [
        "| dtype | path | rows | " + " | ".join(f"{n} tokens" for n in bw) + " |",
        "|---|---|---:|" + "---:|" * len(bw),
    ]
    for r, name, e in _entries(result):
        compile_s = f"{e['compile']['warmup_s']:.0f}" if e.get("compile") else ""
        read = e.get("read_gb_per_s") or (r["bandwidth"].get("read_gb_per_s") or {}).get("median")  # the path's own
        steps.append(
            f"| {r['dtype']} | {r['bandwidth']['gb_per_s']['median']:.1f} | "
            f"{f'{read:.1f}' if read else ''} | "
            f"{r['matmul']['gflop_per_s']['median']:.0f} | {r['weight_bytes'] / 1e6:.0f} | "
            f"{e.get('floor_step_s', r['floor_step_s']) * 1e3:.1f} | {name} | {e['step_s']['median'] * 1e3:.1f} | "
            f"{e['step_over_floor']:.2f} | {compile_s} |"
        )
        v = e["verify_over_step"]
        widths.append(f"| {r['dtype']} | {name} | " + " | ".join(f"{_v(v, n):.2f}" for n in ns) + " |")
        for rows, cells in sorted((e.get("batched") or {}).items(), key=lambda kv: int(kv[0])):
            text = [f"{_v({int(k): c['over_step'] for k, c in cells.items()}, n):.2f}" for n in bw]
            grid.append(f"| {r['dtype']} | {name} | {rows} | " + " | ".join(text) + " |")
    out = [head, "", *steps, "", "V(n): a forward over n tokens at one row, in the path's single steps.", "", *widths]
    if bw:
        out += ["", "A forward over rows x tokens, in the path's single steps:", "", *grid]
    met = goals(result)
    if met:
        out += ["", "Issue 37's goals on each dtype's fastest path on this CPU:", "", *met]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--k-max", type=int, default=8)
    ap.add_argument("--context", type=int, default=200, help="tokens already in the cache when a step is timed")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument(
        "--plain",
        default="eager,static,served",
        help="uncompiled paths: transformers' forward on a "
        "growing (eager) or preallocated (static) cache, and the server's (served: Phoenix's runner)",
    )
    ap.add_argument("--compile", action="store_true", help="also time the compiled paths (minutes of compiling)")
    ap.add_argument("--paths", default="compiled,frozen", help="with --compile: which compiled paths")
    ap.add_argument("--batches", default=BATCHES, help="rows of the batched grid")
    ap.add_argument("--batch-widths", default="1,5,9", help="tokens per row in the batched grid")
    ap.add_argument("--stream-mb", type=int, default=STREAM_BYTES // 2**20, help="size of the bandwidth probe's matrix")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    args.paths = {p.strip() for p in args.paths.split(",") if p.strip()}
    args.plain = {p.strip() for p in args.plain.split(",") if p.strip()}
    dtypes = [measure_dtype(args.target, d.strip(), args) for d in args.dtypes.split(",") if d.strip()]
    settings = {**vars(args), "paths": sorted(args.paths), "plain": sorted(args.plain)}
    path = write("limits", {"settings": settings, "dtypes": dtypes}, Path(args.out))
    from benchmarks.common import latest

    print(markdown(latest("limits", Path(args.out)) or {"dtypes": dtypes}))
    print(f"written to {path}")
    return {"settings": settings, "dtypes": dtypes}


if __name__ == "__main__":
    main()
