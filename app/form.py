"""The New run form's fields and the bench config they stand for, both ways: a run's config fills the form (run
again), the form's values make a config. Pure, so a test can round-trip every run the README cites."""

from __future__ import annotations

from engine.bench.config import BenchConfig
from engine.catalog import (
    EMBEDDED,
    NAMED,
    QWEN05,
    QWEN15,
    QWEN15_EAGLE3,
    SMOLLM2,
    SMOLLM2_DRAFT,
    SMOLLM2_EAGLE3,
    present,
)
from engine.decode.fetch import FETCHERS
from engine.modes import Mode, drafter_arm
from engine.policies.wrappers import FallbackConfig
from engine.prompts.sets import NAMED_SETS

OTHER = "other…"
NO_DRAFT = "none"
FORM_LIMITS = {"max_prompts": 200, "max_new_tokens": 512}  # Spec-Bench's 12 per column is 72; no DoS lever
PROMPT_SETS = list(NAMED_SETS)
PROMPT_FORMATS = ["auto", "chat", "raw"]
DTYPES = ["auto", "float32", "bfloat16", "float16"]
DEVICES = ["auto", "cpu", "cuda"]
FAST = ["off", "exact", "auto"]  # BenchConfig.fast
FAST_HELP = (
    "The forward path: off runs the dtype above eagerly; exact takes the fastest path `python -m benchmarks.limits "
    "--compile` measured on this CPU in that dtype; auto may also take bfloat16 (outputs then checked against "
    "bfloat16 target-only). The run stores what it chose."
)
# What the list offers; any other mode of the grammar can be typed (Mode.parse checks it).
MODE_CHOICES = (
    ["target"]
    + [f"model_{k}" for k in (1, 2, 3, 4, 6, 8)]
    + [f"ngram_{k}" for k in (4, 8)]
    + [f"suffix_{k}" for k in (4, 16)]
    + [f"eagle3_{k}" for k in (2, 3, 4, 6, 8)]
    + ["eagle3-conf_8", "hybrid_16", "model-conf_8"]
    + ["hf_4", "bandit"]
    + [
        f"bandit:{p}"
        for p in (
            "epsilon_greedy",
            "model_based",
            "model_based:pass",
            "ucb1",
            "thompson",
            "category_thompson",
            "ema_hysteresis",
            "contextual_model_based",
        )
    ]
)
SHADOW_HELP = (
    "Without a target mode, this share of requests is decoded a second time target-only, to check that "
    "speculation left the output unchanged (greedy speculation must). With target among the modes every output "
    "is checked against it and this is unused."
)


def real_pair_present() -> bool:
    return present(SMOLLM2) and present(SMOLLM2_DRAFT)


def starting_config() -> BenchConfig:
    """What a newcomer's form opens on: the real pair and the drafters that pay on it once it is here (the head,
    suffix trees, prompt lookup), else the embedded pair; HumanEval's held-out half, as the README's table."""
    if present(SMOLLM2) and present(SMOLLM2_EAGLE3):
        return BenchConfig(
            target=SMOLLM2,
            draft=SMOLLM2_EAGLE3,
            drafter="eagle3",
            modes=["target", "eagle3_3", "suffix_16", "ngram_8"],
            limit=10,
            max_new_tokens=96,
            prompt_format="chat",
            name="",
        )
    if real_pair_present():
        return BenchConfig(target=SMOLLM2, draft=SMOLLM2_DRAFT, modes=["target", "model_1", "suffix_16"], limit=10)
    return BenchConfig(limit=5, max_new_tokens=64)


def _model_field(value: str | None, choices: list[str]) -> tuple[str, str]:
    if value is None:
        return NO_DRAFT, ""
    return (value, "") if value in choices else (OTHER, value)


def values_of(cfg: BenchConfig, targets: list[str], drafts: list[str]) -> dict:
    """The form's widget values (by key) that stand for ``cfg``; ``targets`` and ``drafts`` are the select boxes'
    options, so a model outside them lands in the typed field."""
    target, target_typed = _model_field(cfg.target, targets)
    draft, draft_typed = _model_field(cfg.draft, drafts)
    named_set = cfg.prompts in PROMPT_SETS
    return {
        "n_target": target,
        "n_target_typed": target_typed,
        "n_draft": draft,
        "n_draft_typed": draft_typed,
        "n_drafter": cfg.drafter,
        "n_modes": list(cfg.modes),
        "n_arms": ",".join(map(str, cfg.arms)),
        "n_policy": cfg.policy,
        "n_granularity": cfg.granularity,
        "n_drafter_arms": ",".join(cfg.drafter_arms),
        "n_fallback": bool(cfg.fallback.enabled),
        "n_prompts": cfg.prompts if named_set else BenchConfig.prompts,
        "n_prompts_file": "" if named_set else cfg.prompts,
        "n_limit": int(min(cfg.limit or FORM_LIMITS["max_prompts"], FORM_LIMITS["max_prompts"])),
        "n_per_column": int(cfg.limit_per_column or 0),
        "n_max_new": int(min(cfg.max_new_tokens, FORM_LIMITS["max_new_tokens"])),
        "n_seed": int(cfg.seed),
        "n_temperature": float(cfg.temperature),
        "n_top_p": float(cfg.top_p),
        "n_shadow": float(cfg.shadow_rate),
        "n_format": cfg.prompt_format,
        "n_dtype": cfg.dtype,
        "n_device": cfg.device if cfg.device in DEVICES else "auto",
        "n_fast": cfg.fast,
        "n_name": cfg.name,
    }


def config_of(values: dict) -> BenchConfig:
    """The bench config the form's values stand for (checked afterwards, field by field, by actions)."""
    target = values["n_target_typed"].strip() if values["n_target"] == OTHER else values["n_target"]
    draft_choice = values["n_draft"]
    draft = (
        None
        if draft_choice == NO_DRAFT
        else (values["n_draft_typed"].strip() if draft_choice == OTHER else draft_choice)
    )
    return BenchConfig(
        target=target,
        draft=draft,
        drafter=values["n_drafter"],
        prompts=values["n_prompts_file"].strip() or values["n_prompts"],
        limit=int(values["n_limit"]),
        limit_per_column=int(values["n_per_column"]) or None,
        max_new_tokens=int(values["n_max_new"]),
        prompt_format=values["n_format"],
        dtype=values["n_dtype"],
        device=values["n_device"],
        fast=values.get("n_fast", "off"),
        modes=[m.strip() for m in values["n_modes"] if m.strip()],
        drafter_arms=[a.strip() for a in values["n_drafter_arms"].split(",") if a.strip()],
        policy=values["n_policy"],
        granularity=values["n_granularity"],
        fallback=FallbackConfig(enabled=bool(values["n_fallback"])),
        seed=int(values["n_seed"]),
        temperature=float(values.get("n_temperature", 0.0)),
        top_p=float(values.get("n_top_p", 1.0)),
        name=values["n_name"].strip(),
        shadow_rate=float(values["n_shadow"]),
        max_new_tokens_cap=FORM_LIMITS["max_new_tokens"],
        max_prompts=FORM_LIMITS["max_prompts"],
    )


def label(choice: str) -> str:
    """A model choice in a few words: its name, size and whether it is here yet (the long description is the
    select box's help)."""
    if choice not in NAMED:
        return choice
    short = {
        EMBEDDED: "tiny pair, tests",
        SMOLLM2: "target",
        SMOLLM2_DRAFT: "draft model",
        SMOLLM2_EAGLE3: "EAGLE-3 head",
        QWEN15: "target",
        QWEN05: "draft model",
        QWEN15_EAGLE3: "EAGLE-3 head",
    }
    state = "" if present(choice) else (" · not here: fetched first" if choice in FETCHERS else " · not here")
    return f"{choice} ({short.get(choice, 'model')}, {NAMED[choice].size_mb} MB){state}"


def models_help(choices: list[str]) -> str:
    return "\n\n".join(f"**{c}**: {NAMED[c].what}" for c in choices if c in NAMED)


def drafters_of(cfg: BenchConfig) -> set[str]:
    """The drafters the run's modes and arms draft with."""
    modes = [Mode.of(m) for m in cfg.modes] + [drafter_arm(a) for a in cfg.drafter_arms]
    return {m.drafter(cfg.drafter) for m in modes if m.kind != "target" and not (m.is_bandit and cfg.drafter_arms)}
