"""A run before it executes: its stored config with provenance, and its row.

Light on purpose (no torch import), so the dashboard and `submit` can queue runs.
"""

from __future__ import annotations

import platform
import subprocess
from dataclasses import asdict
from importlib import metadata

from db.entities import RunInfo
from db.store import Store
from engine.bench.config import BenchConfig
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
        "git_sha": git_sha(),
    }


def create_run(store: Store, cfg: BenchConfig, status: str = "running") -> RunInfo:
    """Count the prompts and write the run row with the full config (validated where it entered)."""
    prompts = load_prompts(cfg.prompts, cfg.limit, cfg.limit_per_column)
    name = cfg.name or ",".join(cfg.modes)
    config = {"bench": asdict(cfg), "environment": environment()}
    return store.create_run(name, config, cfg.target, cfg.draft, len(prompts) * len(cfg.modes), status=status)
