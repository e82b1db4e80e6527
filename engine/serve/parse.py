"""A request body read into what the loop needs, every bad field one 400 that names it (OpenAI's error shape):
bounded in size, strict in type, and no field accepted that Phoenix would then ignore.
"""

from __future__ import annotations

import json

from fastapi import Request as HttpRequest
from starlette.requests import ClientDisconnect

from engine.decode.decoder import template_ids
from engine.decode.sampling_params import MAX_LOGPROBS, SamplingParams
from engine.serve.service import Service

NEUTRAL: dict[str, tuple] = {  # fields Phoenix does not act on: only the values that change nothing are taken
    "n": (None, 1),
    "best_of": (None, 1),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "echo": (None, False),
    "suffix": (None, ""),
    "use_beam_search": (None, False),
}
# the type each neutral value must have: True == 1 and 0 == False in Python, so `n: true`, `echo: 0` and
# `presence_penalty: false` once passed as the neutral values
NEUTRAL_TYPES: dict[str, tuple[type, ...]] = {
    "n": (int,),
    "best_of": (int,),
    "presence_penalty": (int, float),
    "frequency_penalty": (int, float),
    "repetition_penalty": (int, float),
    "echo": (bool,),
    "suffix": (str,),
    "use_beam_search": (bool,),
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
DEFAULT_TEMPERATURE = 0.0  # greedy where the request says nothing (OpenAI's default is 1): a lab's default is
# the decoding whose output speculation must not change; send a temperature to sample
MAX_STOPS = 16  # stop strings a request may send (OpenAI takes 4; vLLM any number)
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}  # developer: OpenAI's
# newer name for the system role


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
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ApiError(413, f"the body is over {MAX_BODY_BYTES} bytes", code="too_large")
            chunks.append(chunk)
    except ClientDisconnect:  # the client left mid-upload: nobody to answer, and no server error (it was a 500)
        raise ApiError(499, "the client went away before its request arrived", code="client_gone") from None
    try:
        body = json.loads(b"".join(chunks))
    except RecursionError:  # JSON nested 100,000 deep was a 500 with a 75-line log
        raise ApiError(400, "the body is nested too deeply to be a request") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    return body


def check_fields(body: dict) -> None:
    if not isinstance(body.get("stream", False), bool):  # "stream": "false" is truthy: it once streamed
        raise ApiError(400, f"stream must be true or false, got {body['stream']!r}", param="stream")
    for name, harmless in UNHONOURED.items():
        if body.get(name) not in harmless:
            raise ApiError(400, f"{name} is not supported by Phoenix's server; leave it out", param=name)
    for name, neutral in NEUTRAL.items():
        value = body.get(name)
        typed = value is None or (
            isinstance(value, NEUTRAL_TYPES[name]) and (bool in NEUTRAL_TYPES[name]) == (type(value) is bool)
        )
        if not typed or value not in neutral:
            raise ApiError(400, f"{name}={value!r} is not supported by Phoenix's server; leave it out", param=name)


def _number(body: dict, name: str, default: float, low: float, high: float, open_low: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (low < value if open_low else low <= value)
    if not ok or not value <= high:  # NaN fails this too
        span = f"({low:g}, {high:g}]" if open_low else f"[{low:g}, {high:g}]"
        raise ApiError(400, f"{name} must be a number in {span}, got {value!r}", param=name)
    return float(value)


def _whole(body: dict, name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ApiError(400, f"{name} must be a whole number in {low}..{high}, got {value!r}", param=name)
    return value


def _logprobs(body: dict, chat: bool) -> int | None:
    """How many top logprobs a token carries (None: no logprobs): chat's ``logprobs`` (a bool) and
    ``top_logprobs``, or the completions API's ``logprobs`` (a count)."""
    if not chat:
        return _whole(body, "logprobs", 0, MAX_LOGPROBS)
    wanted = body.get("logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise ApiError(400, f"logprobs must be true or false, got {wanted!r}", param="logprobs")
    top = _whole(body, "top_logprobs", 0, MAX_LOGPROBS)
    if top and not wanted:
        raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    return (top or 0) if wanted else None


def sampling_of(service: Service, body: dict, chat: bool) -> SamplingParams:
    """The request's sampling: temperature, top_p, top_k, min_p, seed, logprobs and stop_token_ids, each checked
    exactly (a string is not a number, a bool not a count)."""
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or abs(seed) >= 1 << 63):
        raise ApiError(400, f"seed must be a whole number (64-bit), got {seed!r}", param="seed")
    top_k = body.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < -1):
        raise ApiError(400, f"top_k must be -1, 0 or a positive count, got {top_k!r}", param="top_k")
    vocab = service.decoder.pair.target.config.vocab_size
    stop_ids = body.get("stop_token_ids")
    stop_ids = [] if stop_ids is None else stop_ids  # 0, "", {} or false are no list of ids, not an empty one
    if not isinstance(stop_ids, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in stop_ids
    ):
        raise ApiError(400, f"stop_token_ids must be a list of token ids in 0..{vocab - 1}", param="stop_token_ids")
    return SamplingParams(
        temperature=_number(body, "temperature", DEFAULT_TEMPERATURE, 0.0, 100.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, open_low=True),
        top_k=top_k or 0,
        min_p=_number(body, "min_p", 0.0, 0.0, 1.0),
        seed=None if seed is None else seed % (1 << 63),
        logprobs=_logprobs(body, chat),
        stop_token_ids=tuple(stop_ids),
    )


def flag(body: dict, name: str) -> bool:
    """A vLLM extension's true/false field (include_stop_str_in_output, ignore_eos), off when left out."""
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false, got {value!r}", param=name)
    return value


def stops_of(body: dict) -> list[str]:
    """The request's stop strings (OpenAI's ``stop``: one string or a list of them)."""
    stop = body.get("stop")
    if stop is None or stop == []:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOPS:
        raise ApiError(400, f"stop must be a string or a list of up to {MAX_STOPS} non-empty strings", param="stop")
    for s in stops:
        check_unicode(s, "stop")
    return stops


def include_usage(body: dict) -> tuple[bool, bool]:
    """Whether a stream ends with a usage chunk (``stream_options.include_usage``, OpenAI's default off), and whether
    every chunk carries the usage so far (vLLM's ``continuous_usage_stats``, which GuideLLM sends; only with
    include_usage, as vLLM reads it)."""
    options = body.get("stream_options")
    if options is None:
        return False, False
    if not body.get("stream"):
        raise ApiError(400, "stream_options is only allowed with stream: true", param="stream_options")
    if not isinstance(options, dict) or set(options) - {"include_usage", "continuous_usage_stats"}:
        raise ApiError(
            400, 'stream_options takes {"include_usage": bool, "continuous_usage_stats": bool}', "stream_options"
        )
    wanted = [options.get(name, False) for name in ("include_usage", "continuous_usage_stats")]
    if not all(isinstance(w, bool) for w in wanted):
        raise ApiError(
            400,
            f"include_usage and continuous_usage_stats must be true or false, got {options!r}"[:300],
            "stream_options",
        )
    return wanted[0], wanted[0] and wanted[1]


def prompt_ids(service: Service, body: dict, chat: bool) -> list[int]:
    tok = service.decoder.pair.tokenizer
    if chat:
        messages = [message_of(m) for m in chat_messages(body)]
        if not any(m["content"].strip() for m in messages):
            raise ApiError(400, "the messages are empty: send some text", param="messages")
        if not getattr(tok, "chat_template", None):
            raise ApiError(400, f"{service.model_name} has no chat template: use /v1/completions", param="messages")
        return template_ids(tok, messages)
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


def chat_messages(body: dict) -> list:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content}", param="messages")
    return messages


def message_of(m) -> dict:
    """One chat message as the template takes it: its role (``developer`` read as ``system``) and its text, given
    as a string or as a list of text parts (``[{"type": "text", "text": ...}]``)."""
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise ApiError(400, f"each message needs a role ({', '.join(ROLES)}) and text content", "messages")
    content = m.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            raise ApiError(400, 'content parts must be text parts: {"type": "text", "text": "..."}', "messages")
        content = "".join(p["text"] for p in content)
    if not isinstance(content, str):
        raise ApiError(400, "each message's content must be text or a list of text parts", "messages")
    check_unicode(content, "messages")
    return {"role": ROLES[m["role"]], "content": content}


def check_unicode(text: str, param: str) -> None:
    """A lone surrogate ("\\ud800") is valid JSON but no text: it was a 500 from the tokenizer."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, f"{param} holds a lone surrogate, which is not text: send valid Unicode", param) from None


def max_tokens(service: Service, body: dict, chat: bool, n_prompt: int) -> int:
    ctx = getattr(service.decoder.pair.target.config, "max_position_embeddings", None) or 1 << 30
    cap = service.cfg.max_tokens_cap
    name = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    value = body.get(name)
    if value is None:
        if n_prompt >= ctx:  # nothing left to generate in: the prompt is the problem, not a negative max_tokens
            raise ApiError(
                400,
                f"the prompt ({n_prompt} tokens) fills the model's context of {ctx}; shorten it",
                param="messages" if chat else "prompt",
            )
        value = min(cap, ctx - n_prompt) if chat else DEFAULT_COMPLETION_TOKENS
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= cap:
        raise ApiError(400, f"{name} must be a whole number in 1..{cap}, got {value!r}", param=name)
    if n_prompt + value > ctx:
        raise ApiError(
            400,
            f"the prompt ({n_prompt} tokens) + {name} ({value}) exceed the model's context of {ctx}; shorten "
            f"the prompt or lower {name}",
            param=name,
        )
    return value


MAX_SALT = 128  # characters of a cache_salt, and the characters it may not hold: vLLM's rules, so one client's
SALT_FORBIDDEN = ("@", "/", "\\", "\x00")  # salt is good for both servers


def cache_salt_of(body: dict) -> str:
    """vLLM's ``cache_salt``: a non-empty string that keeps this request's prefix-cache blocks apart from every
    request with another salt (or none); "" where the request sends none."""
    salt = body.get("cache_salt")
    if salt is None:
        return ""
    if not isinstance(salt, str) or not salt or len(salt) > MAX_SALT or any(c in salt for c in SALT_FORBIDDEN):
        raise ApiError(
            400,
            f"cache_salt must be a non-empty string of at most {MAX_SALT} characters without '@', '/', '\\' or NUL",
            "cache_salt",
        )
    return salt


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
