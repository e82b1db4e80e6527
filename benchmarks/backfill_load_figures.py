"""Give the first load runs their figures: runs #53-#62 and #69-#71 (2026-12-01) stored every request and each
variant's wall time but no `figures`, which `engines load` has written since; findings' load tables read them.
The same function computes them (engine.engines.arrivals.figures, vLLM bench serve's definitions), and each run's
note says when and how. Runs that have figures are left alone.

    python -m benchmarks.backfill_load_figures [--db sqlite:///benchmarks/results.db]
"""

from __future__ import annotations

import argparse
import datetime as dt

from engine.cli.options import open_store
from engine.engines.arrivals import figures, slos_of
from engine.engines.config import LoadConfig

RUNS = [*range(53, 63), 69, 70, 71]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="sqlite:///benchmarks/results.db")
    store = open_store(parser.parse_args(argv).db, create_if_empty=False)
    today = dt.date.today().isoformat()
    for run_id in RUNS:
        run = store.get_run(run_id)
        cfg = (run.config or {}) if run is not None else {}
        load = cfg.get("load")
        if run is None or cfg.get("figures") or not isinstance(load, dict) or not cfg.get("wall_s"):
            continue
        rows = store.requests(run_id)
        slos = slos_of(load.get("goodput") or LoadConfig.goodput)
        per = {
            v: figures([r for r in rows if r.mode.startswith(f"{load['engine']}-{v}_")], cfg["wall_s"][v], slos)
            for v in cfg["variants"]
        }
        store.merge_config(run_id, {"figures": per})
        said = f"Figures computed {today} from this run's stored requests and wall times (benchmarks/"
        said += "backfill_load_figures.py): it predates them."
        store.set_note(run_id, (run.note + "\n\n" if run.note else "") + said)
        print(f"run {run_id}: " + ", ".join(f"{v} {f['output_throughput']:.1f} tok/s" for v, f in per.items()))


if __name__ == "__main__":
    main()
