"""A run before it executes: its stored config with provenance (engine.provenance), and its row.

Light on purpose (no torch import), so the dashboard and `submit` can queue runs.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from db.entities import RunInfo
from db.store import Store
from engine import runspec
from engine.bench import fast
from engine.bench.config import BenchConfig
from engine.errors import PhoenixError
from engine.prompts.sets import load as load_prompts
from engine.provenance import environment


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
    info = store.create_run(name, config, cfg.target, cfg.draft, len(prompts) * len(cfg.modes), status=status)
    spec = runspec.recorded(replace(info, bench=cfg), cfg.modes)  # the record of what ran, kept with the run
    store.merge_config(info.id, spec)
    return replace(info, config={**info.config, **spec})
