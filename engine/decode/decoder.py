"""One request on either loop with any drafter: tokenize, check, decode, and return plain stats."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from engine.decode.choice import ChoiceDrafter
from engine.decode.compiled import CompileStats, StaticCaches, compile_models
from engine.decode.config import HybridConfig, SuffixConfig
from engine.decode.drafters import Drafter, ModelDrafter, NgramDrafter
from engine.decode.eagle3 import Eagle3Drafter, Eagle3Head
from engine.decode.hf_assisted import generate_hf
from engine.decode.hybrid import HybridDrafter
from engine.decode.loading import LoadedPair
from engine.decode.sampling_params import GREEDY, SamplingParams
from engine.decode.sequence import RequestStats
from engine.decode.spec import generate
from engine.decode.suffix import SuffixDrafter
from engine.errors import PhoenixError
from engine.measure import sha256_text
from engine.modes import DRAFTERS, K_MAX, check_k
from engine.prompts.sets import check_prompt


def check_max_new_tokens(n: int, cap: int) -> int:
    if n <= 0 or n > cap:
        raise PhoenixError(f"--max-new-tokens must be in 1..{cap}, got {n}", field="max_new_tokens")
    return n


def format_prompt(tokenizer, text: str, earlier: tuple[tuple[str, str], ...] = ()) -> list[int]:
    """The text as the user's turn of the tokenizer's chat template, ready for the assistant's answer; thinking
    disabled where the template supports it (Qwen3's enable_thinking). ``earlier`` holds the conversation's
    previous (user, assistant) turns. Without a template, the raw text."""
    if getattr(tokenizer, "chat_template", None):
        messages = [
            m
            for user, answer in earlier
            for m in ({"role": "user", "content": user}, {"role": "assistant", "content": answer})
        ]
        return template_ids(tokenizer, messages + [{"role": "user", "content": text}])
    return tokenizer(raw_conversation(text, earlier), add_special_tokens=False)["input_ids"]


def template_ids(tokenizer, messages: list[dict]) -> list[int]:
    """Messages through the tokenizer's chat template as Phoenix's server sends them to the model: ready for the
    assistant's answer, thinking off where the template has it (transformers 5 returns a dict, 4 a list)."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=False, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def raw_conversation(text: str, earlier: tuple[tuple[str, str], ...] = ()) -> str:
    """A conversation as plain text for a raw prompt: each earlier turn and its answer, then the new turn."""
    return "\n\n".join([part for pair in earlier for part in pair] + [text])


def finite(x: float | None) -> float | None:
    """None for a time a loop does not expose (assisted generation's prefill), and for a NaN from elsewhere."""
    return None if x is None or x != x else x


def identity(output_ids: list[int], reference: list[int]) -> tuple[bool, int | None]:
    """(identical, first diverging position) of an output against its target-only reference: the one check the lab
    and the server make."""
    at = first_divergence(output_ids, reference)
    return at is None, at


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token, or None when the lists are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass
class Decoder:
    pair: LoadedPair
    max_new_cap: int = 4096
    cache: str = "dynamic"  # dynamic | static: a KV cache preallocated per size bucket, reused by every request
    cache_positions: int = 0  # static: the run's cache size (a request that needs more gets a bigger bucket)
    compile_stats: CompileStats = field(default_factory=CompileStats)

    def __post_init__(self):
        self._caches = StaticCaches()
        self._target = self.pair.target  # what runs the target's forwards: the model, or its compiled wrapper
        draft = self.pair.draft
        self._head = draft if isinstance(draft, Eagle3Head) else None
        self._model_drafter = (
            ModelDrafter(draft, self.pair.shared_vocab) if draft is not None and self._head is None else None
        )
        self._eagle3 = (
            Eagle3Drafter(self._head, self.pair.target.get_input_embeddings(), self._head.config.taps)
            if self._head is not None
            else None
        )
        self._ngram = NgramDrafter()
        self._suffix = SuffixDrafter()
        self._hybrid_cfg = HybridConfig()
        self.eos_id = self.pair.tokenizer.eos_token_id

    def prompt_format(self, wanted: str = "auto") -> str:
        """'chat' or 'raw': auto takes the chat template when the target's tokenizer has one (a chat model). The
        value itself was checked with its config; only what depends on the loaded target is judged here."""
        has_template = bool(getattr(self.pair.tokenizer, "chat_template", None))
        if wanted == "chat" and not has_template:
            raise PhoenixError(
                f"--prompt-format chat: {self.pair.target_name!r} has no chat template; use raw", field="prompt_format"
            )
        return "chat" if wanted == "chat" or (wanted == "auto" and has_template) else "raw"

    def encode(self, text: str, prompt_format: str = "raw", earlier: tuple[tuple[str, str], ...] = ()) -> list[int]:
        """``earlier``: a conversation's previous (user turn, answer) pairs, for a second turn."""
        check_prompt(text)
        if self.prompt_format(prompt_format) == "chat":
            ids = format_prompt(self.pair.tokenizer, text, earlier)
        else:
            ids = self.pair.tokenizer(raw_conversation(text, earlier), add_special_tokens=False)["input_ids"]
        if not ids:
            raise PhoenixError("the prompt encodes to no tokens: pass some text")
        return ids

    def check_fits(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        ctx = getattr(self.pair.target.config, "max_position_embeddings", None)
        if ctx and len(prompt_ids) + max_new_tokens > ctx:
            raise PhoenixError(
                f"prompt ({len(prompt_ids)} tokens) + max new tokens ({max_new_tokens}) exceed the target's "
                f"context of {ctx}; shorten the prompt or lower --max-new-tokens"
            )

    def start_run(self, suffix: SuffixConfig, hybrid: HybridConfig | None = None) -> None:
        """A new run: the suffix drafter's global tree starts empty, with the run's settings (the hybrid's trees
        are the suffix drafter's: one global tree per run)."""
        self._suffix = SuffixDrafter(suffix)
        self._hybrid_cfg = hybrid or HybridConfig()

    def choices(self) -> tuple[str, ...]:
        """The drafters this pair can choose among per step: its draft (head or model), prompt lookup, suffix."""
        own = ("eagle3",) if self._eagle3 is not None else ("model",) if self._model_drafter is not None else ()
        return own + ("ngram", "suffix")

    def drafter(self, kind: str) -> Drafter | None:
        if kind == "none":
            return None
        if kind == "choice":
            members = {k: self.drafter(k) for k in self.choices()}
            return ChoiceDrafter({k: d for k, d in members.items() if d is not None})
        if kind == "ngram":
            return self._ngram
        if kind == "suffix":
            return self._suffix
        if kind in ("eagle3", "hybrid"):
            if self._eagle3 is None:
                raise PhoenixError(
                    f"drafter {kind!r} needs an EAGLE-3 head: pass --draft smollm2-eagle3 (or your head's folder)",
                    field="draft",
                )
            if kind == "hybrid":
                return HybridDrafter(self._suffix, self._eagle3, self._hybrid_cfg)
            return self._eagle3
        if kind != "model":
            raise PhoenixError(f"unknown drafter {kind!r}: use {', '.join(DRAFTERS)}", field="drafter")
        if self._head is not None:
            raise PhoenixError(
                f"draft {self.pair.draft_name!r} is an EAGLE-3 head, not a draft model: use --drafter "
                "eagle3 (or eagle3_<k> modes)",
                field="drafter",
            )
        if self._model_drafter is None:
            raise PhoenixError(
                "drafter 'model' needs a draft model: pass --draft, or use --drafter ngram or suffix", field="draft"
            )
        return self._model_drafter

    def row_drafter(self, kind: str) -> Drafter | None:
        """A drafter for one of several requests decoded at once (the server's rows): the stateful ones get their
        own instance over the same weights (the draft model's and the EAGLE-3 head's caches, the suffix trees'
        request tree, sharing the global one); prompt lookup keeps no state and is shared."""
        shared = self.drafter(kind)
        return shared.fork() if shared is not None else None

    def check_drafter(self, kind: str, loop: str = "phoenix") -> None:
        """The drafter can run with this pair in this loop; one line that says what to pass otherwise."""
        if loop == "hf" and self._head is not None:
            raise PhoenixError(
                "transformers' assisted generation cannot draft with an EAGLE-3 head: use "
                "eagle3_<k> (Phoenix's loop) instead of hf_<k>",
                field="modes",
            )
        if loop == "phoenix":
            self.drafter(kind)

    def run(
        self,
        prompt_ids: list[int],
        k: int,
        max_new_tokens: int,
        drafter: str = "none",
        loop: str = "phoenix",
        choose_k=None,
        timed: bool = True,
        confidence: float = 0.0,
        sampling: SamplingParams = GREEDY,
    ) -> RequestStats:
        """Decode one request. k=0 without a per-pass controller is target-only whatever the drafter. ``timed``
        off (a shadow check's reference, a warm-up) runs without the clock and its device syncs. ``confidence``
        above 0 (a -conf mode) stops each draft after the first token the drafter's top probability is under."""
        check_k(k)
        if (k > 0 or choose_k) and drafter == "none":
            raise PhoenixError(f"k={k} needs a drafter: pass --drafter model, ngram or suffix, or k=0", field="drafter")
        check_max_new_tokens(max_new_tokens, self.max_new_cap)
        self.check_fits(prompt_ids, max_new_tokens)
        with torch.inference_mode():
            if loop == "hf":
                self.check_drafter(drafter, loop)
                if not sampling.greedy:
                    raise PhoenixError("hf_<k> modes decode greedily: sample with Phoenix's loop", field="modes")
                return generate_hf(
                    self.pair.target, self.pair.draft, drafter, prompt_ids, k, max_new_tokens, self.eos_id
                )
            used = self.drafter(drafter) if (k > 0 or choose_k) else None
            if used is not None and used.confident:
                used.stop_below = confidence  # per request: the shared drafter serves every mode of the run
            elif confidence > 0:
                raise PhoenixError(f"drafter {drafter!r} has no probabilities to stop on", field="modes")
            positions = max(self.cache_positions, len(prompt_ids) + max_new_tokens + K_MAX + 1)
            cache = self._caches.get(self._target, positions) if self.cache == "static" else None
            if self._model_drafter is not None:
                draft_model = self._model_drafter.model
                self._model_drafter.new_cache = (
                    (lambda: self._caches.get(draft_model, positions)) if self.cache == "static" else None
                )
            return generate(
                self._target, used, prompt_ids, k, max_new_tokens, self.eos_id, choose_k, cache, timed, sampling
            )

    def reference(self, request) -> list[int]:
        """The target-only output a request (engine.decode.sequence.Request) must equal: decoded alone, as it was
        asked: its sampling and seed, its stop strings and stop tokens, its EOS honoured or ignored. Untimed."""
        eos = None if request.ignore_eos else self.eos_id
        with torch.inference_mode():
            stats = generate(
                self._target,
                None,
                list(request.prompt_ids),
                0,
                request.max_new_tokens,
                eos,
                timed=False,
                sampling=request.sampling,
                stop=request.stop,
            )
        return stats.output_ids

    def compile(self, k_max: int, positions: int, freeze: bool = False) -> CompileStats:
        """torch.compile the target's forward (and the draft model's), static cache implied, with the weights frozen
        into the graphs when ``freeze``; every verify length 1..k_max+1 is compiled and run once here, before any
        clock. Where compile fails, the run goes on eager and the stats say why."""
        self.cache = "static"
        draft = self._model_drafter.model if self._model_drafter is not None else None
        taps = self._eagle3.taps if self._eagle3 is not None else ()
        models, self.compile_stats = compile_models(
            [self.pair.target] + ([draft] if draft is not None else []),
            self._caches,
            k_max + 1,
            positions,
            taps,
            freeze=freeze,
        )
        self._target = models[0]
        if self._model_drafter is not None:
            self._model_drafter.model = models[-1]
        return self.compile_stats

    def text(self, stats: RequestStats) -> str:
        return self.pair.tokenizer.decode(stats.output_ids, skip_special_tokens=True)


def stats_dict(stats: RequestStats, text: str) -> dict:
    return {
        "prompt_tokens": stats.prompt_tokens,
        "output_tokens": stats.output_tokens,
        "k": stats.k,
        "output_ids": stats.output_ids,
        "output_text": text,
        "output_sha256": sha256_text(text),
        "proposed": stats.proposed,
        "accepted": stats.accepted,
        "passes": stats.passes,
        "acceptance": stats.acceptance,
        "per_position": [asdict(p) for p in stats.positions],
        "prefill_s": finite(stats.prefill_s),
        "draft_prefill_s": finite(stats.draft_prefill_s),
        "draft_s": stats.draft_s,
        "verify_s": stats.verify_s,
        "ttft_s": finite(stats.ttft_s),
        "latency_s": stats.latency_s,
        "tokens_per_s": stats.tokens_per_s,
    }
