"""The run vocabulary, defined once: the largest k, the arm set and the mode grammar.

A mode string is parsed once into a ``Mode``; every consumer (bench, form, analysis,
charts) asks the value object instead of matching strings itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from engine.errors import PhoenixError

DEFAULT_MAX_BATCH = 8  # rows a server decodes together unless told otherwise: serve, the scheduler, fleets, plans
K_MAX = 16  # largest draft length anywhere: arms, <drafter>_<k>, per-pass k
DEFAULT_ARMS = (0, 2, 4, 6, 8)  # Phoenix's bandit arms
GRANULARITIES = ("request", "pass")  # how often a policy may change k
# Three words, three things. A drafter proposes tokens: none (target-only), the draft model, or a model-free one. A
# loop runs the request: Phoenix's own, or transformers' assisted generation (hf_<k>) for comparison. An engine is
# a serving engine only (vLLM, SGLang, llama.cpp), answering served modes.
# hybrid drafts from the suffix trees where their match is confident and from the EAGLE-3 head elsewhere, pass by pass
DRAFTERS = ("none", "model", "ngram", "suffix", "eagle3", "hybrid")
RUN_DRAFTERS = (
    "model",
    "ngram",
    "suffix",
    "eagle3",
    "hybrid",
)  # what a run's bandit modes (and old runs' fixed_<k>) draft with (--drafter)
DRAFT_MODEL_DRAFTERS = ("model", "eagle3", "hybrid")  # need --draft: a draft model, or an EAGLE-3 head
CONFIDENT_KINDS = ("model", "eagle3", "hybrid")  # may stop drafting when unsure: <kind>-conf_<k>
LOOPS = ("phoenix", "hf")
PROMPT_FORMATS = (
    "auto",
    "chat",
    "raw",
)  # how prompt text becomes token ids: auto = chat when the target has a template
Drafter = Literal["none", "model", "ngram", "suffix", "eagle3", "hybrid"]
RunDrafter = Literal["model", "ngram", "suffix", "eagle3", "hybrid"]
Loop = Literal["phoenix", "hf"]
PromptFormat = Literal["auto", "chat", "raw"]
Granularity = Literal["request", "pass"]
CacheKind = Literal["dynamic", "static"]

_GRAMMAR = re.compile(
    r"^(?:(?P<target>target)"
    r"|(?P<bandit>bandit)(?::(?P<policy>[a-z0-9_]+))?(?::(?P<gran>request|pass))?"
    r"|(?P<kind>model|ngram|suffix|eagle3|hybrid|hf|fixed)(?P<conf>-conf)?_(?P<k>[0-9]+)"
    r"|(?P<served>vllm|sglang|llamacpp|phoenix)(?:-(?P<variant>[a-z0-9][a-z0-9-]*))?"
    r"_(?:c(?P<level>[0-9]+)|(?P<watch>watch)|(?P<live>live)))$"
)
SERVING_ENGINES = ("vllm", "sglang", "llamacpp", "phoenix")  # OpenAI-compatible servers whose spec-decode counters
# Phoenix reads; phoenix is its own (`python -m engine serve`): phoenix-<variant>_live is a request its server
# recorded, phoenix-<variant>_c<N> one a load sweep sent at concurrency N
# Every mode names its drafter: model_<k> is the draft model. fixed_<k>, which took its drafter from the run's
# --drafter, is read as an alias (a new run stores <drafter>_<k>; migration 0020 renamed old runs' rows).
# <kind>-conf_<k> (model, eagle3, hybrid) drafts up to k while the drafter's top probability stays at or above the run's
# confidence_threshold: transformers' assistant_confidence_threshold (DISCO)
FIXED_ARM_KINDS = ("target", "model", "ngram", "suffix", "eagle3", "hybrid", "fixed")
ARM_HELP = "use target, model_<k>, ngram_<k>, suffix_<k>, eagle3_<k>, hybrid_<k> or <model|eagle3|hybrid>-conf_<k>"
HELP = (
    "use target, model_<k>, ngram_<k>, suffix_<k>, eagle3_<k>, hybrid_<k>, <model|eagle3|hybrid>-conf_<k>, hf_<k>, "
    "bandit or bandit:<policy>[:request|pass]"
)


ONE_GRAMMAR = re.compile(r"^(?P<drafter>none|model|ngram|suffix|eagle3|hybrid):(?P<k>[0-9]+|auto)$")


def lab_spelling(text: str) -> str:
    """A mode in the one grammar every page shows (engine.runspec.Speculation.text: off, eagle3:3) as the lab's own
    spelling (target, eagle3_3); any other spelling as it is, so both are accepted wherever modes are typed."""
    text = text.strip()
    if text == "off":
        return "target"
    m = ONE_GRAMMAR.match(text)
    if m is None or m["k"] == "auto":  # <drafter>:auto is a server's tuner, not a lab mode
        return text
    return "target" if m["drafter"] == "none" or int(m["k"]) == 0 else f"{m['drafter']}_{int(m['k'])}"


def load_spelling(text: str) -> str:
    """The one grammar as a load sweep's Phoenix variant: off -> none, eagle3:3 -> eagle3-k3, ngram:auto ->
    ngram-auto; any other spelling as it is."""
    text = text.strip()
    if text == "off":
        return "none"
    m = ONE_GRAMMAR.match(text)
    if m is None:
        return text
    if m["drafter"] == "none" or m["k"] == "0":
        return "none"
    return f"{m['drafter']}-" + ("auto" if m["k"] == "auto" else f"k{int(m['k'])}")


def check_k(k: int) -> int:
    if not 0 <= k <= K_MAX:
        raise PhoenixError(f"k={k} is out of range: use 0..{K_MAX}", field="k")
    return k


@dataclass(frozen=True)
class Mode:
    text: str
    kind: str  # target | model | ngram | suffix | eagle3 | hybrid | hf | bandit | served, fixed (old), other
    k: int | None = None  # fixed draft length (the most a -conf mode drafts); None for bandit and served modes
    policy: str | None = None  # bandit:<policy>; None means the run's --policy
    granularity: str | None = None  # bandit:<policy>:<granularity>; None means the run's --granularity
    server: str | None = None  # served modes: vllm, sglang or llamacpp
    variant: str | None = None  # served modes: the server's speculation (llamacpp-ngram-simple_c1: ngram-simple)
    confident: bool = False  # <kind>-conf_<k>: drafting stops at the first token under the confidence threshold

    @classmethod
    def parse(cls, text: str) -> Mode:
        m = _GRAMMAR.match(text or "")
        if not m:
            raise PhoenixError(f"unknown mode {text!r}: {HELP}")
        if m["target"]:
            return cls(text, "target", 0)
        if m["bandit"]:
            return cls(text, "bandit", None, m["policy"], m["gran"])
        if m["kind"]:
            k = int(m["k"])
            if not 1 <= k <= K_MAX:
                raise PhoenixError(f"mode {text!r}: k must be in 1..{K_MAX}")
            if m["conf"] and m["kind"] not in CONFIDENT_KINDS:
                raise PhoenixError(
                    f"mode {text!r}: only a drafter with probabilities stops when unsure: use "
                    f"{', '.join(f'{c}-conf_<k>' for c in CONFIDENT_KINDS)}"
                )
            return cls(text, m["kind"], k, confident=bool(m["conf"]))
        return cls(text, "served", server=m["served"], variant=m["variant"])

    @classmethod
    def of(cls, text: str) -> Mode:
        """For stored rows, which may hold any mode: kind 'other' instead of an error."""
        try:
            return cls.parse(text)
        except PhoenixError:
            return cls(text, "other")

    @property
    def is_bandit(self) -> bool:
        return self.kind == "bandit"

    @property
    def is_fixed_arm(self) -> bool:
        """One (drafter, k) in Phoenix's loop for the whole run: target-only, model_<k>, ngram_<k>, suffix_<k> or
        eagle3_<k>. These are the arms a policy is judged against (the best single arm in hindsight)."""
        return self.kind in FIXED_ARM_KINDS

    def named(self, run_drafter: str) -> str:
        """The mode as every page names it: fixed_<k> (an old run's, or typed by habit) under its drafter's name,
        and k written once (ngram_04 is ngram_4); any other mode as it is."""
        if self.kind in ("fixed", "model", "ngram", "suffix", "eagle3", "hybrid", "hf") and self.k is not None:
            return f"{run_drafter if self.kind == 'fixed' else self.kind}{'-conf' if self.confident else ''}_{self.k}"
        return self.text

    def drafts_with(self, run_drafter: str) -> bool:
        """Drafts with the run's --drafter: its bandits, and the fixed modes of that drafter. The break-even fit
        (one a, one c) covers these modes."""
        if self.is_bandit:
            return True
        return self.kind not in ("target", "hf", "served", "other") and self.drafter(run_drafter) == run_drafter

    def drafter(self, run_drafter: str, has_draft_model: bool = True) -> str:
        """What proposes this mode's tokens: a bandit (and an old run's fixed_<k>) takes the run's --drafter; hf_<k>
        drafts with the draft model when there is one and with prompt lookup otherwise, as transformers does. A
        served mode names its server's own speculation as ``<server>:<type>``, which is none of Phoenix's
        DRAFTERS (``<server>:as served`` where the mode does not say)."""
        if self.kind == "hf":
            return "model" if has_draft_model else "ngram"
        if self.kind == "served":
            return f"{self.server}:{self.variant or 'as served'}"
        return {
            "target": "none",
            "fixed": run_drafter,
            "bandit": run_drafter,
            "model": "model",
            "ngram": "ngram",
            "suffix": "suffix",
            "eagle3": "eagle3",
            "hybrid": "hybrid",
        }.get(self.kind, "none")

    @property
    def loop(self) -> str | None:
        """Which loop runs this mode's requests: hf_<k> transformers', every other Phoenix's; None for a served
        mode, which a serving engine (``server``) answered."""
        return None if self.kind == "served" else ("hf" if self.kind == "hf" else "phoenix")

    def needs_draft_model(self, run_drafter: str) -> bool:
        return self.kind != "target" and (self.kind == "hf" or self.drafter(run_drafter) in DRAFT_MODEL_DRAFTERS)

    def arm_label(self, k: int) -> str:
        """How charts name one arm of this mode: bandit arms carry their k."""
        return self.text if self.k is not None else f"{self.text} k={k}"


def reference_mode(modes) -> str | None:
    """What every speedup of a run is a ratio against: Phoenix's target-only mode, or a server started without
    speculation (llamacpp-none_c1)."""
    modes = list(modes)
    if "target" in modes:
        return "target"
    return next((m for m in modes if Mode.of(m).kind == "served" and Mode.of(m).variant == "none"), None)


def drafter_arm(text: str) -> Mode:
    """One arm of a drafter-choosing policy (--drafter-arms): a mode that fixes a drafter and k for a request."""
    try:
        mode = Mode.parse(text.strip())
    except PhoenixError:
        mode = Mode.of(text)
    if not mode.is_fixed_arm:
        raise PhoenixError(f"drafter arm {text!r} is not one (drafter, k): {ARM_HELP}", field="drafter_arms")
    return mode
