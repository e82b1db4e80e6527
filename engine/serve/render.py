"""A finished request as OpenAI's and vLLM's clients read it: the whole response, the stream's chunks, usage,
logprobs in the completions and the chat shapes, and what speculation did (Phoenix's ``speculation`` object and
vLLM's per-request ``metrics``, side by side)."""

from __future__ import annotations

import json

from engine.decode.sampling import TokenLogprob
from engine.decode.sequence import Finished, Request
from engine.measure import vllm_request_metrics
from engine.serve.service import Service


def finish_reason(f: Finished) -> str:
    """OpenAI's finish reason: the sequence's own (stop at EOS or a stop string or token, length at the budget)."""
    return "stop" if f.reason == "stop" else "length"


def usage(f: Finished) -> dict:
    n_out = f.stats.output_tokens
    return {
        "prompt_tokens": f.stats.prompt_tokens,
        "completion_tokens": n_out,
        "total_tokens": f.stats.prompt_tokens + n_out,
        "prompt_tokens_details": {"cached_tokens": f.stats.cached_tokens},  # served by the prefix cache
    }


def request_metrics(service: Service, f: Finished) -> dict:
    """vLLM's per-request ``metrics`` (engine.measure.vllm_request_metrics); its k is the request's own, else the
    server's most (what vLLM calls num_spec_tokens), 0 for a request that never drafts."""
    s, req = f.stats, f.request
    k = 0 if req.drafter == "none" else (req.k if req.k is not None else service.cfg.k_max)
    return vllm_request_metrics(s.k_per_pass, s.accepted_per_pass, k, s.ttft_s, s.latency_s, f.queue_s, s.output_tokens)


def token_text(tokenizer, token: int) -> str:
    return tokenizer.decode([token], skip_special_tokens=False)


def logprobs_body(tokenizer, lps: list[TokenLogprob], chat: bool, offset: int = 0) -> dict | None:
    """Logprobs in the chat shape (``content``: token, logprob, bytes, top_logprobs) or the completions shape
    (tokens, token_logprobs, top_logprobs, text_offset); ``offset``: the text already sent before these."""
    if not lps:
        return None
    if chat:

        def entry(token: int, logprob: float) -> dict:
            text = token_text(tokenizer, token)
            return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

        return {"content": [entry(t.token, t.logprob) | {"top_logprobs": [entry(i, v) for i, v in t.top]} for t in lps]}
    tokens = [token_text(tokenizer, t.token) for t in lps]
    offsets, at = [], offset
    for text in tokens:
        offsets.append(at)
        at += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": [t.logprob for t in lps],
        "top_logprobs": [{token_text(tokenizer, i): v for i, v in t.top} for t in lps],
        "text_offset": offsets,
    }


def response_body(service: Service, f: Finished, chat: bool, created: int, text: str) -> dict:
    tok = service.decoder.pair.tokenizer
    choice: dict = {
        "index": 0,
        "finish_reason": finish_reason(f),
        "stop_reason": f.stop_reason,  # vLLM's: the stop string or token id that ended it; None at EOS
        "logprobs": logprobs_body(tok, f.logprobs, chat),
    }
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return {
        "id": ("chatcmpl-" if chat else "cmpl-") + f.request.id,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": service.model_name,
        "choices": [choice],
        "usage": usage(f),
        "speculation": service.speculation(f),
        "metrics": request_metrics(service, f),
    }


def chunk(service: Service, req: Request, chat: bool, created: int, delta: dict | None, reason=None, **extra) -> str:
    """One server-sent event in OpenAI's chunk shape; ``delta`` None: a chunk without choices (the usage one).
    ``extra``: ``logprobs`` and ``stop_reason`` go in the choice, anything else beside ``choices``."""
    logprobs, stop_reason = extra.pop("logprobs", None), extra.pop("stop_reason", None)
    if delta is None:
        choices = []
    elif chat:
        choices = [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": reason}]
    else:
        choices = [{"index": 0, "text": delta.get("content", ""), "logprobs": logprobs, "finish_reason": reason}]
    if reason is not None and choices:
        choices[0]["stop_reason"] = stop_reason
    body = {
        "id": ("chatcmpl-" if chat else "cmpl-") + req.id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": service.model_name,
        "choices": choices,
        **extra,
    }
    return f"data: {json.dumps(body)}\n\n"
