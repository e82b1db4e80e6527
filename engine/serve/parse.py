"""A request body read into what the loop needs, every bad field one 400 that names it (OpenAI's error shape):
bounded in size, strict in type, greedy only, and no field accepted that Phoenix would then ignore.
"""

from __future__ import annotations

import json

from fastapi import Request as HttpRequest

from engine.serve.service import Service

GREEDY_ONLY: dict[str, tuple] = {  # field: the values that mean greedy decoding (None: the field left out)
    "temperature": (None, 0, 0.0),
    "top_p": (None, 1, 1.0),
    "top_k": (None, -1, 0, 1),  # top_k 1 is greedy too
    "min_p": (None, 0, 0.0),
    "n": (None, 1),
    "best_of": (None, 1),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "logprobs": (None, False, 0),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "stop": (None, [], ""),
    "suffix": (None, ""),
    "use_beam_search": (None, False),
}
DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default for /v1/completions
MAX_BODY_BYTES = 1 << 20  # a request body past this is a 413: a 4 MB prompt once stalled /health for 15 s
UNHONOURED: dict[str, tuple] = {  # fields Phoenix cannot honour: refused by name, never accepted and ignored
    "logit_bias": (None, {}),
    "response_format": (None, {"type": "text"}),
    "tools": (None, []),
    "tool_choice": (None, "none", "auto"),
    "functions": (None, []),
    "function_call": (None, "none", "auto"),
}
SPECULATION_KEYS = ("drafter", "k")


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


async def read_body(request: HttpRequest) -> dict:
    """The body as a JSON object, read up to MAX_BODY_BYTES (413 past it, from the header or as it arrives)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"the body is {declared} bytes; at most {MAX_BODY_BYTES} are read", code="too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, f"the body is over {MAX_BODY_BYTES} bytes", code="too_large")
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks))
    except RecursionError:  # JSON nested 100,000 deep was a 500 with a 75-line log
        raise ApiError(400, "the body is nested too deeply to be a request") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    return body


def check_greedy(body: dict) -> None:
    if not isinstance(body.get("stream", False), bool):  # "stream": "false" is truthy: it once streamed
        raise ApiError(400, f"stream must be true or false, got {body['stream']!r}", param="stream")
    for name, harmless in UNHONOURED.items():
        if body.get(name) not in harmless:
            raise ApiError(400, f"{name} is not supported by Phoenix's server; leave it out", param=name)
    for name, greedy in GREEDY_ONLY.items():
        if body.get(name) not in greedy:
            raise ApiError(
                400,
                f"Phoenix decodes greedily (speculation is verified against the target's argmax): {name}="
                f"{body[name]!r} is not supported; leave it out or use {greedy[1]!r}",
                param=name,
            )


def prompt_ids(service: Service, body: dict, chat: bool) -> list[int]:
    tok = service.decoder.pair.tokenizer
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "messages must be a non-empty list of {role, content}", param="messages")
        for m in messages:
            if (
                not isinstance(m, dict)
                or not isinstance(m.get("content"), str)
                or m.get("role")
                not in (
                    "system",
                    "user",
                    "assistant",
                )
            ):
                raise ApiError(400, "each message needs a role (system, user, assistant) and text content", "messages")
        for m in messages:
            check_unicode(m["content"], "messages")
        if not any(m["content"].strip() for m in messages):
            raise ApiError(400, "the messages are empty: send some text", param="messages")
        if not getattr(tok, "chat_template", None):
            raise ApiError(400, f"{service.model_name} has no chat template: use /v1/completions", param="messages")
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, enable_thinking=False)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    # a bool is an int to Python: [true, false] is not a list of token ids (it once reached the prefill and
    # stopped the loop)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        vocab = service.decoder.pair.target.config.vocab_size
        if any(not 0 <= t < vocab for t in prompt):
            raise ApiError(400, f"token ids must be in 0..{vocab - 1}", param="prompt")
        return list(prompt)
    if not isinstance(prompt, str):
        raise ApiError(400, "prompt must be a string (one prompt per request) or a list of token ids", "prompt")
    if not prompt.strip():
        raise ApiError(400, "the prompt is empty: send some text", param="prompt")
    check_unicode(prompt, "prompt")
    return tok(prompt, add_special_tokens=False)["input_ids"]


def check_unicode(text: str, param: str) -> None:
    """A lone surrogate ("\\ud800") is valid JSON but no text: it was a 500 from the tokenizer."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, f"{param} holds a lone surrogate, which is not text: send valid Unicode", param) from None


def max_tokens(service: Service, body: dict, chat: bool, n_prompt: int) -> int:
    ctx = getattr(service.decoder.pair.target.config, "max_position_embeddings", None) or 1 << 30
    cap = service.cfg.max_tokens_cap
    value = body.get("max_completion_tokens") if chat else None
    value = body.get("max_tokens") if value is None else value
    if value is None:
        value = min(cap, ctx - n_prompt) if chat else DEFAULT_COMPLETION_TOKENS
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= cap:
        raise ApiError(400, f"max_tokens must be a whole number in 1..{cap}, got {value!r}", param="max_tokens")
    if n_prompt + value > ctx:
        raise ApiError(
            400,
            f"the prompt ({n_prompt} tokens) + max_tokens ({value}) exceed the model's context of {ctx}; shorten "
            "the prompt or lower max_tokens",
            param="max_tokens",
        )
    return value


def speculation_of(service: Service, body: dict) -> tuple[str, int | None]:
    """The request's drafter and k: the server's drafter with the tuner's k, unless it says otherwise."""
    spec = body.get("speculation") or {}
    if not isinstance(spec, dict):
        raise ApiError(400, 'speculation must be an object, e.g. {"drafter": "none"} or {"k": 3}', "speculation")
    unknown = sorted(set(spec) - set(SPECULATION_KEYS))
    if unknown:  # {"K": 3} and {"kk": 2} were taken as valid and ignored
        raise ApiError(400, f"speculation takes drafter and k only, got {', '.join(map(repr, unknown))}", "speculation")
    if spec.get("drafter") == "none" and spec.get("k") not in (None, 0):
        raise ApiError(400, 'speculation {"drafter": "none"} drafts nothing: leave k out', param="speculation")
    if "drafter" in spec and not isinstance(spec["drafter"], str):
        raise ApiError(400, "speculation.drafter must be a drafter's name", param="speculation")
    drafter = spec.get("drafter", service.drafter)
    if drafter != "none" and drafter != service.drafter:
        try:
            service.decoder.drafter(drafter)
        except Exception as exc:
            raise ApiError(400, f"speculation.drafter: {exc}", param="speculation") from None
    k = spec.get("k")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= service.cfg.k_max):
        raise ApiError(400, f"speculation.k must be in 0..{service.cfg.k_max}, got {k!r}", param="speculation")
    return ("none" if k == 0 else drafter), (None if drafter == "none" else k)
