"""Dashboard at scale: synthetic requests written through the store, then the Run
page's queries and one AppTest render of it, timed.

    python -m benchmarks.dashboard [--sizes 10000,200000] [--single-run 200000] [--many-runs 10000] [--repeats 3]

Two cases: the database holds runs of --run-size requests and the page shows one of
them (--sizes), or the page shows one run that holds every request (--single-run).
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from benchmarks.common import spread, write
from db import migrate
from db.entities import BanditRecord, PositionCount, RequestRecord, RunFilter
from db.store import Store

MODES = [("target", 0), ("model_4", 4), ("bandit", None)]


def synthetic(run_id: int, seq: int, rng: random.Random) -> RequestRecord:
    mode, k = MODES[seq % 3]
    k = rng.choice([0, 2, 4, 6, 8]) if k is None else k
    acc = [rng.randint(0, 40) for _ in range(k)]
    acc = sorted(acc, reverse=True)
    latency = rng.uniform(0.5, 3.0)
    rec = RequestRecord(
        run_id=run_id,
        seq=seq,
        mode=mode,
        k=k,
        prompt_id=f"HumanEval/{seq % 164}",
        prompt_tokens=120,
        output_tokens=128,
        latency_s=latency,
        ttft_s=0.02,
        tokens_per_s=128 / latency,
        proposed=40 * k,
        accepted=sum(acc),
        passes=40,
        draft_s=0.2 * k / 8,
        verify_s=latency - 0.2 * k / 8,
        output_text="def f(x):\n    return x\n",
        output_sha256="0" * 64,
        identical=True,
        trace_id=f"{seq:032x}",
        positions=[PositionCount(i, 40, a) for i, a in enumerate(acc)],
    )
    if mode == "bandit":
        rec.bandit = BanditRecord(
            t=seq // 3,
            epsilon=0.05,
            explored=False,
            chosen_k=k,
            arm_means={"4": 50.0},
            arm_counts={"4": seq // 3},
            reward=rec.tokens_per_s,
        )
    return rec


def build(url: str, n: int, run_size: int, batch: int = 5000) -> float:
    """n requests in runs of run_size; the timed page shows run 1."""
    migrate.upgrade(url)
    store = Store(url)
    rng = random.Random(0)
    t0 = time.perf_counter()
    for first in range(0, n, run_size):
        size = min(run_size, n - first)
        run = store.create_run(
            "scale",
            {"bench": {"modes": [m for m, _ in MODES], "prompts": "humaneval-test"}},
            "embedded",
            "embedded",
            size,
            status="done",
        )
        for start in range(0, size, batch):
            store.add_requests([synthetic(run.id, s, rng) for s in range(start, min(size, start + batch))])
    return n / (time.perf_counter() - t0)


def time_queries(url: str, repeats: int) -> dict:
    """The Run page's queries as app/data.py makes them: the results table reuses the (mode, k) sums."""
    store = Store(url)
    shared = {}
    steps = {
        "arm_totals": lambda: shared.update(totals=store.arm_totals(1)),
        "mode_summaries": lambda: store.mode_summaries(1, totals=shared["totals"]),
        "positions": lambda: store.positions(1),
        "request_sample": lambda: store.request_sample(1),
        "bandit": lambda: store.bandit_history(1),
        "identity": lambda: store.identity(1),
        "runs_frame": lambda: store.runs_frame(),
    }
    out = {}
    for name, fn in steps.items():
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        out[name] = spread(times)
    out["all_queries_median_s"] = sum(v["median"] for v in out.values() if isinstance(v, dict))
    return out


def time_page(url: str) -> float:
    from streamlit.testing.v1 import AppTest

    os.environ["PHOENIX_DB"] = url
    os.environ["PHOENIX_AUTOSTART_WORKER"] = "0"
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app" / "main.py"), default_timeout=120)
    at.query_params["run"] = "1"
    at.run()
    at.switch_page("views/run.py")
    t = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - t
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return elapsed


def build_runs(url: str, n: int) -> float:
    """n finished runs of 3 requests each, one in ten tagged and one in twenty archived: the Runs page's load."""

    migrate.upgrade(url)
    store = Store(url)
    rng = random.Random(1)
    t0 = time.perf_counter()
    for i in range(n):
        run = store.create_run(
            f"run {i}",
            {"bench": {"modes": [m for m, _ in MODES], "prompts": "humaneval-test"}},
            "embedded",
            "embedded",
            3,
            status="done",
        )
        store.add_requests([synthetic(run.id, s, rng) for s in range(3)])
        if i % 10 == 0:
            store.add_tags(run.id, [f"sweep-{i % 7}"])
        if i % 20 == 0:
            store.set_archived(run.id, True)
    return n / (time.perf_counter() - t0)


def time_runs_page(url: str, repeats: int) -> dict:
    """The Runs page's reads (one sorted, filtered page of 50, the total, the page's rates) and one AppTest render."""
    from streamlit.testing.v1 import AppTest

    store = Store(url)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        page = store.runs_frame(limit=50, sort="name", descending=False)
        store.runs_count()
        store.run_mode_rates(page["id"].tolist())
        store.runs_frame(RunFilter(tag="sweep-3"), limit=50)
        times.append(time.perf_counter() - t)
    os.environ["PHOENIX_DB"] = url
    os.environ["PHOENIX_AUTOSTART_WORKER"] = "0"
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app" / "main.py"), default_timeout=120)
    t = time.perf_counter()
    at.run()
    render = time.perf_counter() - t
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return {"queries": spread(times), "runs_page_render_s": render}


def measure(url: str, n: int, run_size: int, repeats: int) -> dict:
    rate = build(url, n, run_size)
    q = time_queries(url, repeats)
    page = time_page(url)
    print(
        f"{n:>8} requests ({run_size} in the shown run): insert {rate:,.0f} req/s; Run page queries "
        f"{q['all_queries_median_s']:.3f} s; AppTest render {page:.2f} s"
    )
    return {"insert_rows_per_s": rate, "queries": q, "run_page_render_s": page, "shown_run_requests": run_size}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sizes = lambda s: [int(x) for x in s.split(",") if x.strip()]  # noqa: E731
    p.add_argument("--sizes", type=sizes, default=[10_000, 200_000])
    p.add_argument("--single-run", type=sizes, default=[200_000], help="sizes of one run that the page shows")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--run-size", type=int, default=2000, help="requests per run; the page shows one run")
    p.add_argument("--many-runs", type=sizes, default=[10_000], help="run counts for the Runs page case")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    results, single, many = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            results[n] = measure(f"sqlite:///{tmp}/scale-{n}.db", n, min(args.run_size, n), args.repeats)
        for n in args.single_run:
            single[n] = measure(f"sqlite:///{tmp}/single-{n}.db", n, n, args.repeats)
        for n in args.many_runs:
            url = f"sqlite:///{tmp}/runs-{n}.db"
            rate = build_runs(url, n)
            many[n] = {"runs_per_s": rate, **time_runs_page(url, args.repeats)}
            print(
                f"{n:>8} runs: Runs page queries {many[n]['queries']['median']:.3f} s (median), AppTest render "
                f"{many[n]['runs_page_render_s']:.2f} s"
            )
    payload = {"settings": vars(args), "results": results, "single_run": single, "many_runs": many}
    name = "dashboard" if results or single else "dashboard_runs"  # the Runs-page case alone has its own file
    path = write(name, payload, Path(args.out)) if args.out else write(name, payload)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
