"""`--fast`: the fastest forward path `benchmarks.limits` measured on this CPU, chosen before a run loads.

A path is a dtype and how the target's forward runs: ``eager`` (a growing cache), ``static`` (a cache preallocated
once), ``compiled`` (torch.compile over the static cache) or ``frozen`` (compiled with the weights frozen into the
graphs and prepacked). Which is fastest depends on the CPU far more than on the model: the same verify of 5 tokens
cost 1.08 single steps on one 2-core machine and 1.70 on another. So the choice is read from a measurement taken on
this CPU (same model, family, speed flags and torch), never assumed, and the run stores what it chose and from
which file. ``exact`` keeps the run's dtype (fp32 outputs equal target-only's); ``auto`` may also take bf16, and
then the run says so and counts its outputs against bf16 target-only, as every bf16 run does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from engine.paths import ROOT
from engine.provenance import cpu

FastChoice = Literal["off", "exact", "auto"]
PATHS = ("eager", "static", "compiled", "frozen")  # how a forward runs, slowest to set up last
LIMITS_DIR = ROOT / "benchmarks" / "results"  # where `python -m benchmarks.limits` writes its files
MEASURE = "python -m benchmarks.limits --compile"  # what measures every path on this machine


def here() -> dict:
    """What must match for a measurement to speak for this machine."""
    from importlib import metadata

    info = cpu()
    return {"cpu": info["cpu"], "cpu_flags": info["cpu_flags"], "torch": metadata.version("torch")}


def same_machine(provenance: dict, machine: dict) -> bool:
    return all(provenance.get(key) == value for key, value in machine.items())


def measurement(machine: dict, results_dir: Path) -> tuple[Path, dict] | None:
    """The newest limits file measured on this machine, or None."""
    for path in sorted(results_dir.glob("limits-*.json"), reverse=True):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a file cut short by a killed benchmark speaks for nothing
        if (
            isinstance(data, dict)
            and isinstance(data.get("provenance"), dict)
            and same_machine(data["provenance"], machine)
        ):
            return path, data
    return None


def _sane(x, top: float) -> bool:
    """A measured figure: a finite number above 0 and at most ``top`` (a negative time was once the fastest)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x <= top


def forward_s(entry: dict, k_max: int) -> float | None:
    """A path's mean seconds for one forward over n tokens, n = 1 .. k_max + 1 (every width a run's verify and draft
    steps take, weighted alike), from one limits entry; None where it was not measured, or not sanely: a file of
    another shape, a time that is not a positive number, counts as no measurement."""
    try:
        step = (entry.get("step_s") or {}).get("median")
        widths = {int(n): v for n, v in (entry.get("verify_over_step") or {}).items()}
    except (AttributeError, TypeError, ValueError):
        return None
    use = [widths[n] for n in range(1, k_max + 2) if n in widths]
    if not _sane(step, 60.0) or not use or not all(_sane(v, 1000.0) for v in use):
        return None
    return step * sum(use) / len(use)


def widest(limits: dict, k_max: int) -> int:
    """The widest forward the choice weighed: k_max + 1, or the widest the file measured when that is less."""
    try:
        measured = [
            int(n)
            for r in limits.get("dtypes", [])
            for p in PATHS
            for n in (r.get(p) or {}).get("verify_over_step", {})
        ]
    except (AttributeError, TypeError, ValueError):
        measured = []
    return min(k_max + 1, max(measured, default=1))


def candidates(limits: dict, k_max: int, dtypes: set[str] | None = None) -> dict[tuple[str, str], float]:
    """(dtype, path) -> mean forward seconds, for every path the file measured that compiled where it was asked to."""
    out = {}
    rows = limits.get("dtypes")
    for r in rows if isinstance(rows, list) else []:
        if not isinstance(r, dict) or not isinstance(r.get("dtype"), str):
            continue
        if dtypes is not None and r["dtype"] not in dtypes:
            continue
        for path in PATHS:
            entry = r.get(path)
            if not isinstance(entry, dict) or not entry:
                continue
            if isinstance(entry.get("compile"), dict) and not entry["compile"].get("compiled", True):
                continue
            seconds = forward_s(entry, k_max)
            if seconds is not None:
                out[(r["dtype"], path)] = seconds
    return out


def resolve(cfg, results_dir: Path | None = None, machine: dict | None = None) -> dict | None:
    """Set ``cfg``'s dtype, cache, compile and freeze to the fastest measured path and return what was chosen and
    why (stored with the run); None when ``--fast`` is off. Calling it twice chooses the same path."""
    if cfg.fast == "off":
        return None
    record: dict = {"asked": cfg.fast, "chose": None}
    if cfg.device != "cpu" and not (cfg.device == "auto" and not _has_gpu()):
        return {**record, "why": f"--fast measures CPU paths; the run keeps its path on {cfg.device}"}
    machine = machine or here()
    found = measurement(machine, results_dir or LIMITS_DIR)
    if found is None:
        return {**record, "why": f"no limits measurement on this CPU ({machine['cpu']}): run `{MEASURE}` first"}
    path, limits = found
    dtype = "float32" if cfg.dtype == "auto" else cfg.dtype  # what auto loads on a CPU
    options = candidates(limits, cfg.k_max(), {dtype} if cfg.fast == "exact" else None)
    if not options:
        return {**record, "why": f"{path.name} measured no path for {dtype}", "from": path.name}
    (dtype, best), seconds = min(options.items(), key=lambda item: item[1])
    apply(cfg, dtype, best)
    return {
        **record,
        "chose": {"dtype": dtype, "path": best},
        "from": path.name,
        "cpu": machine["cpu"],
        "mean_forward_ms": {f"{d} {p}": round(s * 1e3, 2) for (d, p), s in sorted(options.items())},
        "why": f"{dtype} {best}: {seconds * 1e3:.1f} ms a forward over 1..{widest(limits, cfg.k_max())} tokens, "
        f"the fastest of {len(options)} paths measured on this CPU",
    }


def _has_gpu() -> bool:
    import torch  # lazy: queueing a run from the dashboard loads no torch until here

    return bool(torch.cuda.is_available() or torch.backends.mps.is_available())


def apply(cfg, dtype: str, path: str) -> None:
    cfg.dtype = dtype
    cfg.cache = "dynamic" if path == "eager" else "static"
    cfg.compile = path in ("compiled", "frozen")
    cfg.freeze = path == "frozen"


def path_of(cfg) -> str:
    """The path a config runs: the one name runs, pages and `benchmarks.limits` use for it."""
    if cfg.compile:
        return "frozen" if cfg.freeze else "compiled"
    return cfg.cache if cfg.cache == "static" else "eager"


def line(record: dict | None) -> str | None:
    """One line for the terminal: what --fast chose, or why it kept the run's path."""
    if record is None:
        return None
    if record["chose"] is None:
        return f"--fast {record['asked']}: kept the run's path: {record['why']}"
    bf16 = record["chose"]["dtype"] != "float32"
    note = "; outputs are checked against target-only in the same dtype" if bf16 else ""
    return f"--fast {record['asked']}: {record['why']} ({record['from']}){note}"
