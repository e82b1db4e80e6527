"""A benchmark run's configuration and its one validation, before anything loads or is written."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field

from engine.bench.fast import FastChoice
from engine.config import check_choices, from_dict
from engine.decode.config import HybridConfig, PairConfig, SuffixConfig
from engine.decode.sampling_params import GREEDY, SamplingParams
from engine.errors import PhoenixError
from engine.modes import (
    DEFAULT_ARMS,
    K_MAX,
    CacheKind,
    Granularity,
    Mode,
    PromptFormat,
    RunDrafter,
    drafter_arm,
    lab_spelling,
)
from engine.policies.registry import REWARD_ONLY, policy_names
from engine.policies.wrappers import FallbackConfig


@dataclass
class BenchConfig(PairConfig):
    drafter: RunDrafter = "model"  # what bandit modes draft with: model | ngram | suffix | eagle3 | hybrid
    prompts: str = (
        "humaneval-test"  # humaneval-test | humaneval-train | humaneval | spec-bench-test | spec-bench-train |
        # spec-bench | FILE.jsonl
    )
    limit: int | None = 20  # first N prompts of the set
    limit_per_column: int | None = field(
        default=None, metadata={"aliases": ["--limit-per-category"]}
    )  # Spec-Bench: the first N questions of each leaderboard column (its 6 groups), second turns too; replaces --limit
    max_new_tokens: int = 128  # tokens generated per request
    prompt_format: PromptFormat = (
        "auto"  # auto | chat | raw: auto sends prompts through the target's chat template when it has one
    )
    modes: list[str] = field(
        default_factory=lambda: ["target", "model_4", "bandit"]
    )  # target, model_<k>, ngram_<k>, suffix_<k>, eagle3_<k>, hybrid_<k>, <model|eagle3|hybrid>-conf_<k>, hf_<k>,
    # bandit, bandit:<policy>[:pass]
    arms: list[int] = field(default_factory=lambda: list(DEFAULT_ARMS))  # the k values a policy chooses from
    drafter_arms: list[str] = field(
        default_factory=list
    )  # (drafter, k) arms a bandit chooses from instead, e.g. target,ngram_4,suffix_16,eagle3_3
    policy: str = "epsilon_greedy"  # what plain 'bandit' runs; 'bandit:<policy>[:pass]' modes name their own
    granularity: Granularity = "request"  # request | pass: may k change between verification passes of one request
    fallback: FallbackConfig = field(default_factory=FallbackConfig)
    suffix: SuffixConfig = field(default_factory=SuffixConfig)  # the suffix drafter (suffix_<k>, --drafter suffix)
    hybrid: HybridConfig = field(default_factory=HybridConfig)  # hybrid_<k>: when the suffix trees draft, not the head
    confidence_threshold: float = 0.4  # <drafter>-conf_<k>: stop a draft after its first token whose top probability
    # is under this (transformers' assistant_confidence_threshold default)
    cache: CacheKind = (
        "dynamic"  # dynamic | static: Phoenix's loop on a KV cache preallocated once per run (rejection moves
        # its write position back)
    )
    compile: bool = (
        False  # torch.compile the target's (and draft model's) forward, static cache implied; compiled and
        # warmed before the clock, compile time and recompiles recorded
    )
    freeze: bool = False  # compile with the weights frozen into the graphs (inductor's freezing: folded, prepacked
    # for oneDNN/MKL), the fastest CPU path where benchmarks.limits measures it so; implies --compile
    fast: FastChoice = "off"  # off | exact | auto: the fastest path benchmarks.limits measured on this CPU (exact: in
    # --dtype, outputs equal target-only; auto: bf16 too); the run stores what it chose and from which file

    # --concurrency N: does speculation pay at the load you run? N prompts of a mode decode together on the path
    # the server runs (engine.decode.scheduler); 1 is the single-stream loop, with static caches and compile
    concurrency: int = 1  # requests of one mode decoded together by the server's batched engine (1: single stream)
    seed: int = 42  # bandit decisions, shadow sampling, and each prompt's sampling seed

    # sampling (engine.decode.sampling): each prompt samples with one seed from --seed and its id in every mode, so
    # its speculative outputs are checked against target-only token for token
    temperature: float = 0.0  # 0 decodes greedily; above 0 every mode samples, exactly in the target's distribution
    top_p: float = 1.0  # sampling: keep the most likely tokens up to this probability mass
    top_k: int = 0  # sampling: keep the k most likely tokens (0: all)
    min_p: float = 0.0  # sampling: drop tokens under this share of the most likely one's probability
    name: str = ""  # defaults to the modes joined
    shadow_rate: float = 0.1  # share re-decoded target-only when 'target' mode is absent
    max_new_tokens_cap: int = 1024  # keeps a web form from becoming a DoS lever
    max_prompts: int = 500  # upper bound of --limit

    def sampling(self, prompt_id: str) -> SamplingParams:
        """One prompt's sampling in every mode: the run's processors, and a seed of its own (the same in every mode,
        so a mode's output is checked against target-only token for token, as greedy outputs are)."""
        if self.temperature == 0.0:
            return GREEDY
        digest = hashlib.sha256(f"{self.seed}:{prompt_id}".encode()).digest()
        return SamplingParams(self.temperature, self.top_p, self.top_k, self.min_p, int.from_bytes(digest[:8]) >> 1)

    def parsed_modes(self) -> list[Mode]:
        return [Mode.parse(m) for m in self.modes]

    def bandit_drafter(self) -> str | None:
        """The run's --drafter where a mode drafts with it (its bandits over k); None when every mode names its own
        drafter, so a run of model-free modes is never headed with a drafter it did not use."""
        uses = any(Mode.of(m).is_bandit or Mode.of(m).kind == "fixed" for m in self.modes) and not self.drafter_arms
        return self.drafter if uses else None

    def arm_modes(self) -> list[Mode]:
        """The drafter-choosing arms, each a mode; [] when bandits choose k for --drafter."""
        return [drafter_arm(a) for a in self.drafter_arms]

    def k_max(self) -> int:
        """The longest draft any mode of the run may propose: the longest verify is k_max + 1 tokens."""
        ks = [m.k or 0 for m in self.parsed_modes()] + [a.k or 0 for a in self.arm_modes()]
        if any(m.is_bandit for m in self.parsed_modes()) and not self.drafter_arms:
            ks += list(self.arms)
        if any(m.is_bandit and (m.granularity or self.granularity) == "pass" for m in self.parsed_modes()):
            ks.append(K_MAX)  # a per-pass controller may pick any k up to the largest arm; be safe
        return max(ks, default=0)

    def policy_arms(self) -> list[int]:
        """What a policy chooses among: k values, or the index of a drafter arm (ties go to the earlier one)."""
        return list(range(len(self.drafter_arms))) if self.drafter_arms else list(self.arms)

    def bandit_spec(self, mode: Mode) -> tuple[str, str]:
        """(policy, granularity) of a bandit mode: plain 'bandit' takes --policy and --granularity."""
        return mode.policy or self.policy, mode.granularity or self.granularity


def validate(cfg: BenchConfig) -> BenchConfig:
    """Every option checked before anything loads or is written, once, where the config enters: the CLI, the
    form, or a stored run being loaded. Each error names its field."""
    check_choices(cfg)
    cfg.check_pack()
    if not cfg.modes:
        raise PhoenixError("--modes is empty: pass e.g. target,model_4,bandit", field="modes")
    _name_drafters(cfg)
    if len(set(cfg.modes)) != len(cfg.modes):
        raise PhoenixError(f"--modes repeats a mode: {','.join(cfg.modes)}", field="modes")
    try:
        modes = cfg.parsed_modes()
    except PhoenixError as exc:
        raise PhoenixError(str(exc), field="modes") from None
    for mode in modes:
        if mode.kind == "served":
            raise PhoenixError(
                f"mode {mode.text!r} is recorded by `python -m engine serve`, not run by bench", field="modes"
            )
        if mode.needs_draft_model(cfg.drafter) and not cfg.draft and not (mode.is_bandit and cfg.drafter_arms):
            raise PhoenixError(
                f"mode {mode.text!r} needs a draft model: pass --draft, or use ngram_<k> modes", field="modes"
            )
    _check_arms(cfg.arms)
    _check_drafter_arms(cfg, modes)
    for mode in [m for m in modes if m.is_bandit] or [Mode.parse("bandit")]:
        policy, _ = cfg.bandit_spec(mode)
        if policy not in policy_names():
            where = mode.text if mode.text != "bandit" else "--policy"
            raise PhoenixError(
                f"unknown policy {policy!r} in {where}: use {', '.join(policy_names())}",
                field="modes" if mode.text != "bandit" else "policy",
            )
    cfg.compile = cfg.compile or cfg.freeze
    cfg.fallback.validate()
    cfg.suffix.validate()
    cfg.hybrid.validate()
    if not 0.0 < cfg.confidence_threshold < 1.0:  # NaN fails this too
        raise PhoenixError(
            f"--confidence-threshold must be in (0, 1), got {cfg.confidence_threshold}", field="confidence_threshold"
        )
    if not 1 <= cfg.max_new_tokens <= cfg.max_new_tokens_cap:
        raise PhoenixError(
            f"--max-new-tokens must be in 1..{cfg.max_new_tokens_cap}, got {cfg.max_new_tokens}", field="max_new_tokens"
        )
    if cfg.limit_per_column is not None and not 1 <= cfg.limit_per_column <= cfg.max_prompts:
        raise PhoenixError(
            f"--limit-per-column must be in 1..{cfg.max_prompts}, got {cfg.limit_per_column}",
            field="limit_per_column",
        )
    if cfg.limit is not None and not 1 <= cfg.limit <= cfg.max_prompts:
        raise PhoenixError(f"--limit must be in 1..{cfg.max_prompts}, got {cfg.limit}", field="limit")
    if not 0.0 <= cfg.shadow_rate <= 1.0:  # NaN fails this too
        raise PhoenixError(f"--shadow-rate must be in 0..1, got {cfg.shadow_rate}", field="shadow_rate")
    _check_concurrency(cfg, modes)
    _check_sampling(cfg, modes)
    check_device(cfg.device)
    check_name(cfg.name)
    cfg.name = unicodedata.normalize("NFC", cfg.name)  # one spelling of a name, as for tags
    return cfg


DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?|mps")
NAME_MAX = 200  # runs.name is String(200)


def check_device(device: str) -> None:
    """Checked with the config, so a queued run cannot fail later on a device no machine has."""
    if not DEVICE.fullmatch(device or ""):
        raise PhoenixError(f"--device must be auto, cpu, cuda, cuda:N or mps, got {device!r}", field="device")


def check_name(name: str) -> None:
    """A run name is one line of printable text that fits its column (terminals print it raw in `runs`)."""
    if len(name) > NAME_MAX:
        raise PhoenixError(f"--name is {len(name)} characters; at most {NAME_MAX}", field="name")
    if any(not ch.isprintable() for ch in name):
        raise PhoenixError(
            "--name must be printable text on one line (no newlines, tabs or escape sequences)", field="name"
        )


MAX_CONCURRENCY = 64


def _check_concurrency(cfg: BenchConfig, modes: list[Mode]) -> None:
    """At --concurrency above 1 every mode runs through the batched engine core, as the server does: fixed
    (drafter, k) modes and target; per-request policies, transformers' loop and -conf modes run single-stream."""
    if not 1 <= cfg.concurrency <= MAX_CONCURRENCY:
        raise PhoenixError(f"--concurrency must be in 1..{MAX_CONCURRENCY}, got {cfg.concurrency}", field="concurrency")
    if cfg.concurrency == 1:
        return
    single = [m.text for m in modes if m.is_bandit or m.kind == "hf" or m.confident]
    if single:
        raise PhoenixError(
            f"--concurrency {cfg.concurrency} batches fixed modes (target, <drafter>_<k>); {', '.join(single)} "
            "run at --concurrency 1",
            field="concurrency",
        )
    if cfg.compile or cfg.cache == "static" or cfg.fast != "off":
        raise PhoenixError(
            f"--concurrency {cfg.concurrency} runs the batched engine eager on growing caches; drop --compile, "
            "--freeze, --cache static and --fast, or run at --concurrency 1",
            field="concurrency",
        )


def _check_sampling(cfg: BenchConfig, modes: list[Mode]) -> None:
    try:
        SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k, cfg.min_p)
    except ValueError as exc:
        raise PhoenixError(f"--{str(exc).replace('_', '-')}", field=str(exc).split()[0]) from None
    hf = [m.text for m in modes if m.loop == "hf"]
    if cfg.temperature > 0 and hf:
        raise PhoenixError(
            f"{hf[0]}: transformers' assisted generation decodes greedily here; sample with Phoenix's modes",
            field="modes",
        )


def _check_arms(arms: list[int]) -> None:
    if not arms:
        raise PhoenixError("--arms is empty: pass e.g. 0,2,4,6,8", field="arms")
    if len(set(arms)) != len(arms):
        raise PhoenixError(f"--arms repeats an arm: {','.join(map(str, arms))}", field="arms")
    bad = [a for a in arms if not 0 <= a <= K_MAX]
    if bad:
        raise PhoenixError(f"--arms {bad[0]} is out of range: arms must be in 0..{K_MAX}", field="arms")


def _name_drafters(cfg: BenchConfig) -> None:
    """Every mode and arm under the name that says its drafter (fixed_4 of a --drafter eagle3 run is eagle3_4) and
    one spelling of k (ngram_04 is ngram_4), so that two spellings are never two modes or two arms."""
    try:
        cfg.modes = [Mode.parse(lab_spelling(m)).named(cfg.drafter) for m in cfg.modes]
    except PhoenixError as exc:
        raise PhoenixError(str(exc), field="modes") from None
    cfg.drafter_arms = [drafter_arm(a).named(cfg.drafter) for a in cfg.drafter_arms]


def _check_drafter_arms(cfg: BenchConfig, modes: list[Mode]) -> None:
    """Drafter arms: each one (drafter, k) the run can load, and only policies that learn from the reward alone,
    since model_based and ema_hysteresis reason about k of one drafter."""
    arms = cfg.arm_modes()
    if not arms:
        return
    if len(arms) < 2 or len({a.text for a in arms}) != len(arms):
        raise PhoenixError(
            "--drafter-arms needs two or more different arms, e.g. target,ngram_4,suffix_16", field="drafter_arms"
        )
    for arm in arms:
        if arm.needs_draft_model(cfg.drafter) and not cfg.draft:
            raise PhoenixError(
                f"drafter arm {arm.text!r} needs --draft (a draft model or an EAGLE-3 head)", field="drafter_arms"
            )
    for mode in [m for m in modes if m.is_bandit]:
        policy, granularity = cfg.bandit_spec(mode)
        if policy.removeprefix("contextual_").removeprefix("category_") not in REWARD_ONLY:
            raise PhoenixError(
                f"{mode.text}: policy {policy!r} models k of one drafter; with --drafter-arms use "
                f"{', '.join(REWARD_ONLY)} (or their contextual_ and category_ copies)",
                field="drafter_arms",
            )
        if granularity != "request" or cfg.fallback.enabled:
            raise PhoenixError(
                f"{mode.text}: --drafter-arms chooses per request; drop pass granularity and "
                "--fallback (put target among the arms instead)",
                field="drafter_arms",
            )


_OLD_FALLBACK = {
    "fallback": "enabled",
    "fallback_window": "window",
    "fallback_margin": "margin",
    "fallback_probe_every": "probe_every",
}


def stored(config: dict) -> BenchConfig:
    """A run's typed bench config from its whole stored config, parsed (not validated: a run page must open even
    if a later version refuses an option). Old shapes are read too: fallback before it became one dataclass,
    runs before prompt formats (encoded raw), and runs that kept the resolved device, dtype and prompt format
    beside 'bench' instead of inside it."""
    values = dict(config.get("bench", {}))
    values.setdefault("prompt_format", "raw")  # runs saved before prompt formats existed encoded prompts raw
    if "limit_per_category" in values:  # its old name: it always kept N per leaderboard column
        values["limit_per_column"] = values.pop("limit_per_category")
    values.pop("packed", None)  # runs of 2026-12-02 kept what --pack chose inside 'bench'; it lives beside it now
    for key in ("device", "dtype", "prompt_format"):
        if key in config:
            values[key] = config[key]
    if not isinstance(values.get("fallback", {}), dict):
        values["fallback"] = {new: values.pop(old) for old, new in _OLD_FALLBACK.items() if old in values}
    return from_dict(BenchConfig, values)
