"""Recording overhead: the same requests bare, with database recording, and with
database recording plus Sentry sending to a local envelope receiver over HTTP.

Per prompt and repeat, the three configurations run back to back in a rotating
order. Each request's wall time is measured around everything the benchmark
runner does for it (decode, record building, identity check, bandit update,
hand-off to the writer thread, Sentry spans); the writer's final flush is
timed separately and spread over the requests. Overhead = wall / bare wall - 1,
per prompt and repeat: median and IQR.

    python -m benchmarks.overhead [--limit 10] [--repeats 3] [--max-new-tokens 96] [--k 4]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import engine  # noqa: F401  (BLAS and offline settings before torch loads)
from benchmarks.common import spread, write
from benchmarks.sentry_receiver import Receiver
from db.migrate import ensure_schema
from db.store import Store
from engine.bench.config import BenchConfig
from engine.bench.request import make_state, run_one
from engine.bench.run import load_decoder
from engine.bench.setup import create_run
from engine.observe.sentry import SentryConfig, init
from engine.prompts.sets import load as load_prompts
from engine.record.writer import Recorder

CONFIGS = ("bare", "db", "db+sentry")


def parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--target", default="embedded")
    p.add_argument("--draft", default="embedded")
    p.add_argument("--prompts", default="humaneval-test")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse(argv)
    cfg = BenchConfig(
        target=args.target,
        draft=args.draft,
        prompts=args.prompts,
        limit=args.limit,
        max_new_tokens=args.max_new_tokens,
        modes=[f"model_{args.k}"],
        device="cpu",
        dtype="float32",
    )
    decoder = load_decoder(cfg)
    prompts = load_prompts(cfg.prompts, cfg.limit)
    encoded = {p.id: decoder.encode(p.text) for p in prompts}
    url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'overhead.db'}"
    ensure_schema(url)
    store = Store(url)
    receiver = Receiver()
    sentry = init(SentryConfig(dsn=receiver.dsn, traces_sample_rate=1.0, profiling=False))
    states = {"db": make_state(decoder, cfg), "db+sentry": make_state(decoder, cfg, sentry)}
    runs = {name: create_run(store, cfg).id for name in states}
    recorders = {name: Recorder(store, runs[name]) for name in states}
    mode = cfg.modes[0]
    decoder.run(encoded[prompts[0].id], args.k, 8, "model")  # warm-up, excluded
    walls: dict[str, dict] = {c: {} for c in CONFIGS}
    for rep in range(args.repeats):
        for i, p in enumerate(prompts):
            order = CONFIGS[(i + rep) % 3 :] + CONFIGS[: (i + rep) % 3]  # rotate against drift and order effects
            for c in order:
                t0 = time.perf_counter()
                if c == "bare":
                    decoder.run(encoded[p.id], args.k, cfg.max_new_tokens, "model")
                else:
                    rec, _ = run_one(states[c], runs[c], cfg, p, encoded[p.id], mode, False, None)
                    recorders[c].put(rec)
                walls[c][(p.id, rep)] = time.perf_counter() - t0
    flush = {}
    for c, r in recorders.items():
        t0 = time.perf_counter()
        r.close()
        flush[c] = time.perf_counter() - t0
    t0 = time.perf_counter()
    sentry.flush()
    flush["db+sentry"] += time.perf_counter() - t0
    sentry.close()
    received = len(receiver.transactions())
    receiver.stop()
    n = len(walls["bare"])
    result = {
        "settings": vars(args),
        "requests_per_config": n,
        "flush_s": flush,
        "sentry_transactions_received": received,
        "rows_recorded": {c: store.count_requests(runs[c]) for c in runs},
        "table": {},
    }
    for c in CONFIGS:
        per = [walls[c][key] / walls["bare"][key] - 1 for key in walls["bare"]]
        amortised = [x + flush.get(c, 0.0) / n / walls["bare"][key] for x, key in zip(per, walls["bare"])]
        result["table"][c] = {
            "wall_s": spread(list(walls[c].values())),
            "overhead": spread(per),
            "overhead_with_flush": spread(amortised),
            "goal_met": c == "bare" or spread(amortised)["median"] < 0.02,
        }
    path = write("overhead", result, Path(args.out)) if args.out else write("overhead", result)
    print(f"{'config':<11}{'median wall (s)':>16}{'overhead median':>17}{'IQR':>20}{'with flush':>12}")
    for c, t in result["table"].items():
        o, f = t["overhead"], t["overhead_with_flush"]
        print(
            f"{c:<11}{t['wall_s']['median']:>16.3f}{o['median']:>17.2%}{o['p25']:>10.2%} to {o['p75']:>6.2%}"
            f"{f['median']:>12.2%}"
        )
    print(f"sentry transactions received by the local receiver: {received}; rows recorded: {result['rows_recorded']}")
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
