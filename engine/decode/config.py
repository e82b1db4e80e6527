"""The settings of what decodes: which pair to load, the suffix trees, the hybrid drafter. Plain dataclasses that
import no torch, so the command line builds its flags (and answers `--help`) without loading a tensor library."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from engine.catalog import EMBEDDED
from engine.errors import PhoenixError
from engine.modes import K_MAX

RUNNERS = ("auto", "phoenix", "compiled", "transformers")
# max tokens a step computes: every row's pending token and drafts, then prompt chunks. vLLM's CPU server default
# (2048): sixteen cold 140-180-token prompts at 16 in flight made 257 output tok/s against 236 at 512 (median of three
# interleaved waves, SmolLM2 bf16, `benchmarks.profile_wave --budget 512,2048`, AMD EPYC Zen 4, 2026-12-06): a wider
# prefill reads the weights fewer times, and the rows then decode without a prompt between their steps
BUDGET = 2048
LONG_PREFILL = 256  # the most of one prompt a step prefills (vLLM's long_prefill_token_threshold)


@dataclass
class PairConfig:
    """Which target and draft to load, and how."""

    target: str = EMBEDDED  # a name (embedded, smollm2), a model directory or a cached Hugging Face id
    draft: str | None = EMBEDDED  # a name (embedded, smollm2-draft), a directory, a cached id, or 'none' (model-free)
    device: str = "auto"  # auto | cpu | cuda
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = (
        "auto"  # auto | float32 | bfloat16 | float16 (auto: float32 on CPU, bfloat16 on CUDA)
    )
    allow_pickle: bool = False  # allow pickle (.bin) weights; only for files you trust
    pack: str = "auto"  # auto | on | off: linear weights prepacked for oneDNN (auto: where measured faster on this
    # CPU; never with --compile, whose --freeze packs its own)

    runner: str = "auto"  # auto | phoenix | compiled | transformers: what runs the forwards (auto: Phoenix's
    # flattened forward for the Llama family and kin (Granite, OLMo2, Phi3), transformers' modeling for any other;
    # compiled also fuses its norm, rotary and MLP with torch.compile)

    def check_pack(self) -> None:
        if self.pack not in ("auto", "on", "off"):
            raise PhoenixError(f"--pack must be auto, on or off, got {self.pack!r}", field="pack")
        if self.runner not in RUNNERS:
            raise PhoenixError(f"--runner must be one of {', '.join(RUNNERS)}, got {self.runner!r}", field="runner")


@dataclass
class SuffixConfig:
    max_tree_depth: int = 24  # longest suffix the trees hold, and so the longest match (ArcticInference: 24)
    max_cached_requests: int = (
        10000  # earlier outputs kept in the global tree, first in first out (ArcticInference: 10000)
    )
    max_spec_factor: float = 1.0  # draft at most this many tokens per matched token (ArcticInference: 1.0)
    max_spec_offset: float = 0.0  # plus this many (ArcticInference: 0)
    min_prob: float = 0.1  # stop drafting when the path's empirical probability falls under this (ArcticInference: 0.1)
    global_tree: bool = True  # the tree over earlier outputs of the run (off: --no-suffix-global-tree)

    def validate(self) -> SuffixConfig:
        checks = [
            (self.max_tree_depth >= 1, "max_tree_depth", "--suffix-max-tree-depth must be >= 1"),
            (self.max_cached_requests >= 0, "max_cached_requests", "--suffix-max-cached-requests must be >= 0"),
            (
                0 <= self.max_spec_factor < math.inf and 0 <= self.max_spec_offset < math.inf,
                "max_spec_factor",
                "--suffix-max-spec-factor and --suffix-max-spec-offset must be finite numbers >= 0",
            ),
            (0.0 <= self.min_prob <= 1.0, "min_prob", "--suffix-min-prob must be in 0..1"),
        ]
        for ok, name, message in checks:
            if not ok:
                raise PhoenixError(message, field=f"suffix.{name}")
        return self


@dataclass
class HybridConfig:
    min_score: float = 1.5  # the suffix trees draft when they expect at least this many accepted tokens (their
    # score); chosen on training prompts (benchmarks.hybrid_calibration: 1.20x suffix_16 at 1.0, 1.28x at 1.5 and
    # 2.0), never on the held-out ones runs report
    head_k: int = 3  # the most the head drafts in a pass (its best fixed k, runs #5 and #65); the suffix trees
    # draft up to the mode's k

    def validate(self) -> HybridConfig:
        if not (0.0 <= self.min_score < math.inf):
            raise PhoenixError("--hybrid-min-score must be a finite number >= 0", field="hybrid.min_score")
        if not 1 <= self.head_k <= K_MAX:
            raise PhoenixError(f"--hybrid-head-k must be in 1..{K_MAX}", field="hybrid.head_k")
        return self
