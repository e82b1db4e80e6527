"""The one row builder for a request Phoenix decoded itself, whichever door it came through (a bench run,
single-stream or batched; a served request), and the server's naming of what a request asked for. Answers of
other servers are rows through engine.engines.rows, from what they answered."""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter

from db.entities import RequestRecord
from engine.decode.decoder import finite
from engine.decode.sequence import Finished
from engine.measure import measured, sha256_text
from engine.prompts.sets import Prompt


def new_trace_id() -> str:
    """A uuid4 hex: the request's Sentry trace id too."""
    return uuid.uuid4().hex


def make_record(
    run_id: int,
    seq: int,
    mode: str,
    k: int,
    prompt: Prompt,
    stats,
    text: str,
    warmup: bool,
    trace_id: str | None,
    finished: Finished | None = None,
) -> RequestRecord:
    """The one row of a request Phoenix decoded itself, from its ``Sequence``'s stats: a bench run's, single-stream
    or batched, and a served one's. ``finished`` (the engine core's end of a request) adds its queue wait, the mean
    batch it ran in, and why it ended where that was not normal. Answers of other servers are rows through
    engine.engines.rows, from what they answered."""
    values = measured(stats)
    values.update(
        k=k,
        ttft_s=finite(stats.ttft_s),
        prefill_s=finite(stats.prefill_s),
        draft_prefill_s=finite(stats.draft_prefill_s) if stats.draft_prefill_s else None,  # 0: no drafter ran
    )
    rec = RequestRecord(
        **values,
        run_id=run_id,
        seq=seq,
        mode=mode,
        prompt_id=prompt.id,
        turn=prompt.turn,
        category=prompt.category,
        prompt_text=prompt.text,
        tokens_per_s=stats.tokens_per_s,
        output_text=text,
        output_sha256=sha256_text(text),
        trace_id=trace_id,
        warmup=warmup,
    )
    if finished is not None:
        rec.queue_s = finished.queue_s
        rec.cached_tokens = finished.stats.cached_tokens
        sizes = finished.batch_sizes
        rec.batch_size = sum(sizes) / len(sizes) if sizes else None
        if finished.cancelled:
            rec.error = "cancelled: the client went away"
        elif finished.failed:
            rec.error = f"{finished.reason}: {finished.error}"
    return rec


def variant(drafter: str, k: int | None) -> str:
    """A request's speculation, as its mode names it: none, <drafter>-auto (the tuner's k) or <drafter>-k<k>."""
    if drafter == "none" or k == 0:
        return "none"
    return f"{drafter}-auto" if k is None else f"{drafter}-k{k}"


def prompt_key(ids: list[int]) -> str:
    """Requests with the same prompt tokens pair up in speedups: the prompt's id is its fingerprint."""
    return "p-" + hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def served_record(f: Finished, run_id: int, seq: int, tokenizer, text: str) -> RequestRecord:
    """A served request's row: its prompt fingerprinted, its mode named by what it asked for, its k the one its
    passes ran at most."""
    s, req = f.stats, f.request
    k = Counter(s.k_per_pass).most_common(1)[0][0] if s.k_per_pass else (req.k or 0)
    prompt = Prompt(prompt_key(req.prompt_ids), tokenizer.decode(req.prompt_ids))
    rec = make_record(
        run_id, seq, f"phoenix-{variant(req.drafter, req.k)}_live", k, prompt, s, text, False, req.id or None, f
    )
    rec.drafter = req.drafter
    return rec
