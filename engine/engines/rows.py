"""One request row from any engine's answer: the one place a measured request of another server (or of Phoenix's
own, measured from outside) becomes a ``RequestRecord``.

What the server said it drafted is read from whichever of three places it used: Phoenix's ``speculation`` object
(every count per position), vLLM's ``metrics.speculative_decoding`` (per verify step, counted here as Phoenix
counts its passes), or llama.cpp's ``timings`` (drafted and accepted totals only). A server that says nothing gets
zeros and no positions: its acceptance is unknown, not zero, and its level's counters carry it.
"""

from __future__ import annotations

from db.entities import PositionCount, RequestRecord
from engine.engines.counters import per_request
from engine.measure import sha256_text
from engine.prompts.sets import Prompt


def row_of(run_id: int, seq: int, mode: str, prompt: Prompt, r: dict, k: int | None = None) -> RequestRecord:
    """``r`` is a whole answer (ServerClient.complete via one_request) or a streamed one (stream_one). ``k``: the
    server's own draft length where it is known; else the k Phoenix's server chose most, or vLLM's. An answer whose
    counts are not counts (``"NaN"``, a string, a negative number) is recorded as failed, saying so."""
    try:
        return _row_of(run_id, seq, mode, prompt, r, k)
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
        bad = {**r, "usage": {}, "speculation": None, "metrics": None, "timings": None, "output_tokens": 0}
        bad["error"] = f"the server's answer holds counts that are not counts ({type(exc).__name__}: {exc})"[:300]
        return _row_of(run_id, seq, mode, prompt, bad, k)


def _count(value) -> int:
    """A token count as a server sends it: a whole number of 0 or more (a bool, a float or "NaN" is not one)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not a token count")
    return value


def cached_of(usage: dict, timings: dict) -> int | None:
    """The prompt tokens the server served from its prefix cache, as it said so: OpenAI's (Phoenix's, vLLM's with
    --enable-prompt-tokens-details) ``usage.prompt_tokens_details.cached_tokens``, else llama.cpp's
    ``timings.cache_n``; None only where the server says nothing of its cache (0 where it says none was cached)."""
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and "cached_tokens" in details:
        return _count(details["cached_tokens"])
    if "cache_n" in timings:
        return _count(timings["cache_n"])
    return None


def _row_of(run_id: int, seq: int, mode: str, prompt: Prompt, r: dict, k: int | None) -> RequestRecord:
    usage, spec = r.get("usage") or {}, r.get("speculation") or {}
    timings = r.get("timings") or {}
    n_out = _count(r.get("output_tokens", usage.get("completion_tokens", 0)))
    lat = r["latency_s"]
    row = RequestRecord(
        run_id=run_id,
        seq=seq,
        mode=mode,
        k=0,
        prompt_id=prompt.id,
        prompt_text=prompt.text,
        prompt_tokens=_count(r.get("prompt_tokens", usage.get("prompt_tokens", 0))),
        output_tokens=n_out,
        latency_s=lat,
        ttft_s=r.get("ttft_s"),
        tokens_per_s=n_out / lat if lat > 0 and r.get("error") is None else 0.0,
        output_text=r["text"],
        output_sha256=sha256_text(r["text"]),
        error=r.get("error"),
        cached_tokens=cached_of(usage, timings),
    )
    vllm = per_request(r.get("metrics"))
    if spec:
        _phoenix(row, spec)
    elif vllm is not None:
        row.proposed, row.accepted, row.positions = vllm.proposed, vllm.accepted, vllm.positions
        # vLLM counts the steps that drafted; a step with no draft (prompt lookup found nothing) made one token
        row.passes = max(vllm.passes, n_out - vllm.accepted)
        sd = r["metrics"]["speculative_decoding"]
        row.k = int(sd.get("num_spec_tokens") or max((p.position + 1 for p in vllm.positions), default=0))
    else:
        drafted = timings.get("draft_n", r.get("draft_n"))
        accepted = timings.get("draft_n_accepted", r.get("draft_n_accepted"))
        row.proposed, row.accepted = int(drafted or 0), int(accepted or 0)
        row.passes = max(0, n_out - row.accepted) if drafted is not None else 0  # one token a pass plus its drafts
    if k is not None:
        row.k = k
    return row


def _phoenix(row: RequestRecord, spec: dict) -> None:
    arms = spec.get("arms") or {}
    row.k = int(max(arms, key=lambda a: arms[a], default=0))
    row.proposed, row.accepted = int(spec.get("proposed", 0)), int(spec.get("accepted", 0))
    row.passes = int(spec.get("passes", 0))
    row.draft_s, row.verify_s = float(spec.get("draft_s") or 0.0), float(spec.get("verify_s") or 0.0)
    row.prefill_s, row.queue_s, row.batch_size = spec.get("prefill_s"), spec.get("queue_s"), spec.get("batch_size_mean")
    row.drafter = spec.get("drafter") or "none"
    row.positions = [
        PositionCount(p["position"], p["proposed"], p["accepted"], p.get("reached", 0))
        for p in spec.get("per_position") or []
    ]
