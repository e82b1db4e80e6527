"""Whether two runs measured the same work: the settings that differ, and the ones that make speeds unlike."""

from __future__ import annotations

import pandas as pd

from engine.modes import Mode

DIFF_KEYS = (
    "target",
    "draft",
    "mode",
    "drafter",
    "bench.dtype",
    "dtype",
    "bench.policy",
    "bench.granularity",
    "bench.prompts",
    "bench.prompt_format",
    "prompt_format",
    "bench.max_new_tokens",
    "bench.limit",
    "bench.seed",
    "bench.temperature",
    "bench.top_p",
    "bench.top_k",
    "bench.min_p",
    "bench.arms",
    "environment",
    "git_sha",
    "versions",
)

# Settings under which two speeds measure different work: a difference is then no verdict on the drafter.
UNLIKE = (
    "target",
    "bench.prompts",
    "bench.max_new_tokens",
    "bench.dtype",
    "dtype",
    "bench.prompt_format",
    "bench.temperature",
    "bench.top_p",
    "bench.top_k",
    "bench.min_p",
)


def _flat(value, prefix: str = "") -> dict:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def drafter_of(info, mode: str) -> str:
    """The drafter a mode of this run actually used: a suffix_4 series of a --drafter ngram run drafted with suffix."""
    run_drafter = info.bench.drafter if info is not None and info.bench is not None else "model"
    return Mode.of(mode).drafter(run_drafter) or "none"


def settings(info, mode: str) -> dict:
    """A series' recorded settings, flattened, with the drafter its mode used in place of the run's --drafter."""
    cfg = {k: v for k, v in _flat(info.config).items() if k != "bench.drafter"}
    cfg.update({"target": info.target, "draft": info.draft, "mode": mode, "drafter": drafter_of(info, mode)})
    return {k: v for k, v in cfg.items() if k.startswith(DIFF_KEYS) and not k.startswith("environment.time")}


def words(key: str) -> str:
    """A recorded setting's key as a reader reads it: bench.limit_per_column -> limit per column."""
    return key.removeprefix("bench.").replace(".", " · ").replace("_", " ")


def shown(value) -> str:
    """A recorded value as text: unset (None) says so rather than printing None."""
    return "not set" if value is None else str(value)


def config_diff(series: dict[str, tuple]) -> pd.DataFrame:
    """Only the settings that differ between series (label -> (run info, mode)): models, drafter, dtype, k, policy,
    prompts, max tokens, machine, versions and git sha, as the runs recorded them; named in words (``setting``),
    with the recorded key beside it for the checks (``key``, not shown)."""
    flat = {label: settings(info, mode) for label, (info, mode) in series.items() if info is not None}
    keys = sorted({k for cfg in flat.values() for k in cfg})
    rows = [
        {"setting": words(k), **{label: shown(cfg.get(k)) for label, cfg in flat.items()}, "key": k}
        for k in keys
        if len({shown(cfg.get(k)) for cfg in flat.values()}) > 1
    ]
    return pd.DataFrame(rows)


def unlike(diff: pd.DataFrame) -> list[str]:
    """The UNLIKE settings among a diff's rows, in words."""
    return [] if diff.empty else [words(k) for k in UNLIKE if k in set(diff["key"])]


def unlike_warning(keys: list[str]) -> str:
    return (
        "These differ in " + ", ".join(keys) + ": their speeds measure different work, so a significant "
        "difference is not a verdict on the drafter."
    )
