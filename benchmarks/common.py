"""Shared by the benchmark scripts: result files with their provenance, and spread."""

from __future__ import annotations

import json
import statistics
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def provenance() -> dict:
    from engine.provenance import environment

    env = environment()  # the CPU with its family and speed flags: engine.bench.fast matches files on them
    return {**env, "date": datetime.now(UTC).isoformat(timespec="seconds")}


def write(name: str, payload: dict, out_dir: Path = RESULTS) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    path = out_dir / f"{name}-{stamp}.json"
    path.write_text(
        json.dumps({"benchmark": name, "provenance": provenance(), **payload}, indent=1, default=str) + "\n"
    )
    return path


def latest(name: str, out_dir: Path = RESULTS) -> dict | None:
    files = sorted(out_dir.glob(f"{name}-*.json"))
    return json.loads(files[-1].read_text()) if files else None


def spread(values: list[float]) -> dict:
    """Median and the interquartile range, the figures a noisy machine can support."""
    if not values:
        return {"median": None, "p25": None, "p75": None, "n": 0}
    qs = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "p25": qs[0], "p75": qs[2], "n": len(values)}
