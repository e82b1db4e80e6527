"""Is this host quiet enough to measure on? A busy or shared host lies: on the 2-core Xeon with AMX the memory's
streaming read fell from 28.8 GB/s (the morning's limits file) to 14.5-17.5 GB/s for a whole evening (2026-12-07),
and Phoenix's memory-bound one-row step slowed 1.4-2x with it while vLLM's overhead-bound one did not, so a sitting
on such a host measures the host. Every run of such a sitting was tagged ``disturbed`` by hand, with the read rate in
its note; this does it for a sitting script: the read rate now (``benchmarks.limits.read_rate``) against the best
any limits file recorded on this CPU model, one line, and exit code 3 below ``--floor`` of it.

    python -m benchmarks.host_check [--floor 0.8] [--reps 5]
    python -m benchmarks.host_check --db URL --tag-since RUN   (below the floor: the runs after RUN tagged
                                                                `disturbed`, the figures in each one's note)
    python -m benchmarks.host_check --db URL --last-run         (the newest run's id, for --tag-since later)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import engine  # noqa: F401  (threads and offline settings before torch loads)
from benchmarks.common import RESULTS
from benchmarks.limits import read_rate, stream_rate
from db.store import Store
from engine.provenance import cpu

FLOOR = 0.8  # a quiet host read within 0.9-1.0x of its best here; the disturbed evenings 0.5-0.6x
DISTURBED = 3  # the exit code a script reads


def reference(cpu: str, results_dir: Path = RESULTS) -> tuple[float, str] | None:
    """The best streaming read any limits file recorded on ``cpu`` (GB/s) and that file's name; None where none."""
    best: tuple[float, str] | None = None
    for path in sorted(results_dir.glob("limits-*.json")):
        try:
            data = json.loads(path.read_text())
            if data["provenance"]["cpu"] != cpu:
                continue
            rate = max(stream_rate(entry["bandwidth"]) for entry in data["dtypes"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a file cut short or of another shape speaks for nothing
        if best is None or rate > best[0]:
            best = (rate, path.name)
    return best


def verdict(now: float, best: tuple[float, str] | None, cpu: str, floor: float) -> tuple[bool, str]:
    """(disturbed, the line that says so)."""
    if best is None:
        return False, f"host read {now:.1f} GB/s; no limits file on {cpu} to judge it by (run benchmarks.limits)"
    share = now / best[0]
    said = "disturbed" if share < floor else "quiet enough"
    return share < floor, (
        f"host read {now:.1f} GB/s against {best[0]:.1f} on {cpu} ({best[1]}): {share:.2f} of it, {said} "
        f"(floor {floor:.2f})"
    )


def tag_since(db: str, since: int, line: str) -> list[int]:
    """Tag every run after ``since`` `disturbed`, the probe's line in its note; the runs tagged."""
    store = Store(db)
    tagged = []
    for run in store.list_runs():
        if run.id > since:
            store.set_tags(run.id, sorted({*run.tags, "disturbed"}))
            note = (run.note or "").strip()
            store.set_note(run.id, f"{note}\n{line}".strip() if line not in note else note)
            tagged.append(run.id)
    return sorted(tagged)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--floor", type=float, default=FLOOR)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--db", default=None)
    ap.add_argument("--tag-since", type=int, default=None)
    ap.add_argument("--last-run", action="store_true")
    args = ap.parse_args(argv)
    if not 0 < args.floor <= 1 or args.reps < 1:
        ap.error("--floor must be in (0, 1] and --reps at least 1")
    if (args.tag_since is not None or args.last_run) and not args.db:
        ap.error("--tag-since and --last-run need --db")
    if args.last_run:
        runs = Store(args.db).list_runs(limit=1)
        print(runs[0].id if runs else 0)
        return 0
    name = cpu()["cpu"]
    disturbed, line = verdict(read_rate(args.reps), reference(name, RESULTS), name, args.floor)
    print(line, flush=True)
    if disturbed and args.tag_since is not None:
        tagged = tag_since(args.db, args.tag_since, line)
        print(f"tagged disturbed: {', '.join(f'#{i}' for i in tagged) or 'no run'}")
    return DISTURBED if disturbed else 0


if __name__ == "__main__":
    sys.exit(main())
