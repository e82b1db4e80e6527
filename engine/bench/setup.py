"""A run before it executes: its stored config with provenance, and its row.

Light on purpose (no torch import), so the dashboard and `submit` can queue runs.
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from db.entities import RunInfo
from db.store import Store
from engine.bench import fast
from engine.bench.config import BenchConfig
from engine.errors import PhoenixError
from engine.paths import ROOT
from engine.prompts.sets import load as load_prompts

VERSIONED = ("torch", "transformers", "sqlalchemy")


def git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict:
    versions: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        **versions,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        **cpu(),
        "git_sha": git_sha(),
    }


SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")  # what moves V(n)


def cpu(cpuinfo: str | None = None) -> dict:
    """The CPU a run measured on (every speed figure names it: the same drafter pays on one and not another), its
    core count and the instruction sets that change the forward's cost."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    lines = cpuinfo.splitlines()

    def field(name: str) -> str:
        return next((line.split(":", 1)[1].strip() for line in lines if line.split(":")[0].strip() == name), "")

    model = field("model name")
    if model and field("cpu family"):  # "AMD EPYC" names two generations: family and model tell them apart
        model = f"{model} (family {field('cpu family')}, model {field('model')})"
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    return {
        "cpu": model or platform.processor() or None,
        "cores": os.cpu_count(),
        "cpu_flags": [f for f in SPEED_FLAGS if f in flags],
    }


def create_run(store: Store, cfg: BenchConfig, status: str = "running") -> RunInfo:
    """Count the prompts and write the run row with the full config (validated where it entered)."""
    prompts = load_prompts(cfg.prompts, cfg.limit, cfg.limit_per_column)
    if len(prompts) > cfg.max_prompts:  # --limit-per-column counts per column: the cap holds for the whole run
        raise PhoenixError(
            f"{len(prompts)} prompts would be queued (--limit-per-column {cfg.limit_per_column} over every column, "
            f"second turns included); the cap is {cfg.max_prompts}: lower --limit-per-column or pass --limit",
            field="limit_per_column",
        )
    name = cfg.name or ",".join(cfg.modes)
    chosen = fast.resolve(cfg)  # before the config is stored: the stored one is the path that runs
    config = {"bench": asdict(cfg), "environment": environment(), **({"fast": chosen} if chosen else {})}
    return store.create_run(name, config, cfg.target, cfg.draft, len(prompts) * len(cfg.modes), status=status)
