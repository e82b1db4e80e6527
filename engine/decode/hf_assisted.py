"""The `hf` loop: the same request through transformers' own assisted generation.

transformers reports no acceptance, so we count it where the library hands it
over: ``update_candidate_strategy(input_ids, scores, num_matches)`` runs once per
verification pass with ``scores`` holding candidate_length + 1 positions.
Draft time is the time spent inside ``get_candidates``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from unittest import mock

import torch

from engine.decode.runner import unwrapped
from engine.decode.sequence import RequestStats
from engine.decode.spec import sync

_PATCH_LOCK = threading.Lock()  # the counters patch classes, so one hf request at a time


@contextlib.contextmanager
def _counting(stats: RequestStats, device):
    from transformers.generation.candidate_generator import (
        AssistedCandidateGenerator,
        PromptLookupCandidateGenerator,
    )

    def wrap_update(orig):
        def update(self, input_ids, scores, num_matches):
            stats.count_pass(int(scores.shape[1]) - 1, int(num_matches))
            return orig(self, input_ids, scores, num_matches)

        return update

    def wrap_get(orig):
        def get(self, *args, **kwargs):
            t = time.perf_counter()
            out = orig(self, *args, **kwargs)
            sync(device)
            stats.draft_s += time.perf_counter() - t
            return out

        return get

    with _PATCH_LOCK, contextlib.ExitStack() as stack:
        for cls in (AssistedCandidateGenerator, PromptLookupCandidateGenerator):
            stack.enter_context(
                mock.patch.object(cls, "update_candidate_strategy", wrap_update(cls.update_candidate_strategy))
            )
            stack.enter_context(mock.patch.object(cls, "get_candidates", wrap_get(cls.get_candidates)))
        yield


@contextlib.contextmanager
def _fixed_k(draft, k: int):
    """generate() ignores these as call keywords in transformers 5.x; they must sit on the draft's
    generation_config, with the heuristic schedule off. The draft's config is left as it was found."""
    gc = draft.generation_config
    keys = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
    before = {key: getattr(gc, key, None) for key in keys}
    gc.num_assistant_tokens = k
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0
    try:
        yield
    finally:
        for key, value in before.items():
            setattr(gc, key, value)


def generate_hf(
    target, draft, drafter: str, prompt_ids: list[int], k: int, max_new_tokens: int, eos_id: int | None
) -> RequestStats:
    target, draft = unwrapped(target), unwrapped(draft)  # transformers' own loop runs transformers' own forward
    device = target.device
    stats = RequestStats(prompt_tokens=len(prompt_ids), k=k)
    x = torch.tensor([prompt_ids], device=device)
    kwargs = dict(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        attention_mask=torch.ones_like(x),
    )
    fixed: contextlib.AbstractContextManager = contextlib.nullcontext()
    if k > 0 and drafter == "model":
        fixed = _fixed_k(draft, k)
        kwargs["assistant_model"] = draft
    elif k > 0 and drafter == "ngram":
        kwargs.update(prompt_lookup_num_tokens=k, max_matching_ngram_size=3)
    with fixed, _counting(stats, device):
        sync(device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = target.generate(x, **kwargs)
        sync(device)
        stats.latency_s = time.perf_counter() - start
    stats.output_ids = out[0, len(prompt_ids) :].tolist()
    stats.output_tokens = len(stats.output_ids)
    # generate() exposes neither the prefill nor the first token's time: verify_s keeps the prefill here, and
    # None says so (stored as NULL), which keeps hf_<k> rows out of the decode-pass fit.
    stats.verify_s = stats.latency_s - stats.draft_s
    stats.ttft_s = stats.prefill_s = stats.draft_prefill_s = None
    return stats
