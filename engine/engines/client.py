"""One OpenAI client for every serving engine (vLLM, SGLang, llama.cpp's llama-server, Phoenix's own): a whole
request (`ServerClient.complete`) or a streamed one (`stream_one`), both with the same greedy body, both bounded.

``timeout_s`` is a deadline for the whole request, not a per-read timeout: a server that sends a byte a second
cannot hold a sweep. A whole answer may take at most ``MAX_BODY`` bytes; a streamed one ``MAX_BYTES``, a line at most
``MAX_LINE``. An ``abort`` event (the sweep was stopped) ends a streamed request at its next chunk. Every way a
streamed request can go wrong (refused, HTTP error, malformed chunk, too big, too slow) is one line in ``error``;
the text and timings received before it are kept.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed

from engine.engines.counters import SpecCounters, parse_metrics
from engine.errors import PhoenixError

# vLLM fills every sampling field a request leaves out from the model's generation_config (for example
# repetition_penalty 1.1), so greedy decoding has to say all of them.
GREEDY = {
    "temperature": 0.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "n": 1,
}
MAX_BODY = 16 << 20  # bytes of one answer (a completion, /metrics, /version) read at most
MAX_BYTES = 16 << 20  # a streamed answer of 96-1,024 tokens is a few hundred kB
MAX_LINE = 1 << 20


def request_body(
    model: str, prompt: str, max_tokens: int, chat: bool, stream: bool, spec: dict | None, extra: dict | None = None
) -> dict:
    """The one body every request sends: greedy in every sampling field, the prompt as one user message through the
    server's chat template (``chat``) or as raw text; ``spec`` is Phoenix's per-request ``speculation``; ``extra``
    an engine's own fields (vLLM's ``return_token_ids``), sent only to that engine."""
    body: dict = {
        "model": model,
        **({"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt}),
    }
    body |= {"max_tokens": max_tokens, **GREEDY}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    if spec is not None:
        body["speculation"] = spec
    return body | (extra or {})


class ServerClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        timeout_s: float = 600.0,
        api_key: str | None = None,
        extra: dict | None = None,
    ):
        # Users paste the OpenAI base URL; the paths below already start with /v1.
        self.base = base_url.rstrip("/").removesuffix("/v1")
        self.model, self.timeout_s, self.api_key, self.extra = model, timeout_s, api_key, extra

    def _open(self, path: str, payload: dict | None = None):
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.base + path, data=data, headers=headers)
        try:
            return urllib.request.urlopen(req, timeout=self.timeout_s)
        except urllib.error.HTTPError as exc:
            detail = exc.read(300).decode(errors="replace")
            raise PhoenixError(f"the server {self.base}{path} answered HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PhoenixError(
                f"cannot reach the server at {self.base} ({getattr(exc, 'reason', exc)}); start it or fix --url"
            ) from None

    def _read(self, resp, path: str) -> bytes:
        """The whole body, within ``timeout_s`` for the whole read (a server sending a byte a second is cut off,
        not waited for) and at most MAX_BODY bytes."""
        deadline, chunks, size = time.monotonic() + self.timeout_s, [], 0
        try:
            while chunk := resp.read1(65536):
                size += len(chunk)
                if size > MAX_BODY:
                    raise PhoenixError(f"the server {self.base}{path} sent more than {MAX_BODY >> 20} MB: not read")
                if time.monotonic() > deadline:
                    raise PhoenixError(f"the server {self.base}{path} did not finish within {self.timeout_s:g} s")
                chunks.append(chunk)
        except OSError as exc:
            raise PhoenixError(f"the server {self.base}{path} broke off its answer ({exc})") from None
        return b"".join(chunks)

    def _json(self, path: str) -> dict | None:
        try:
            with self._open(path) as resp:
                body = json.loads(self._read(resp, path))
            return body if isinstance(body, dict) else None
        except (PhoenixError, ValueError):
            return None

    def identity(self, engine: str = "auto") -> dict:
        """Which engine answers and its version: vLLM's /version, llama.cpp's /props (build_info), SGLang's
        /get_server_info; with ``auto``, the first that answers, else the prefix of its metrics."""
        probes = {
            "vllm": ("/version", "version"),
            "llamacpp": ("/props", "build_info"),
            "sglang": ("/get_server_info", "version"),
            "phoenix": ("/health", "version"),
        }
        for name, (path, key) in probes.items():
            if engine not in ("auto", name):
                continue
            body = self._json(path)
            if body and body.get(key):
                return {"engine": name, "version": str(body[key]), "from": path}
        seen = self.metrics().engine
        return {"engine": engine if engine != "auto" else (seen or "vllm"), "version": None, "from": "/metrics"}

    def metrics(self) -> SpecCounters:
        with self._open("/metrics") as resp:
            return parse_metrics(self._read(resp, "/metrics").decode(errors="replace"))

    def complete(self, prompt: str, max_tokens: int, chat: bool = False, extra: dict | None = None) -> dict:
        """One greedy completion: latency, prompt and completion token counts from the server's usage. ``chat``:
        the prompt as one user message through the server's own chat template (/v1/chat/completions); ``extra``:
        this request's own fields beside the client's (a cache salt)."""
        t0 = time.perf_counter()
        path = "/v1/chat/completions" if chat else "/v1/completions"
        body = request_body(self.model, prompt, max_tokens, chat, False, None, (self.extra or {}) | (extra or {}))
        with self._open(path, body) as resp:
            raw = self._read(resp, path)
        latency = time.perf_counter() - t0
        try:
            return {"latency_s": latency, **_completion(json.loads(raw), chat)}
        except (ValueError, TypeError, AttributeError, KeyError, IndexError):
            raise PhoenixError(
                f"the server {self.base}{path} answered with something that is not an OpenAI completion: "
                f"{raw[:80].decode(errors='replace')!r}"
            ) from None


VllmClient = ServerClient  # the name before other engines came


def sweep_level(
    client: ServerClient, prompts, concurrency: int, max_tokens: int, on_result: Callable[[dict], None] | None = None
) -> tuple[list[dict], dict]:
    """All prompts at one concurrency level; returns per-request results (in prompt order) and the level's counter
    deltas. ``on_result`` gets each answer as it arrives, so a level cut short (Ctrl-C, a server that dies and
    takes its /metrics with it) still leaves every answered request with its caller."""
    before = client.metrics()
    t0 = time.perf_counter()
    results = answered_in_order(prompts, concurrency, lambda p: one_request(client, p, max_tokens), on_result)
    wall = time.perf_counter() - t0
    delta = client.metrics().minus(before)
    tokens = sum(r["output_tokens"] for r in results)
    drafted = [r for r in results if r.get("draft_n") is not None]
    level = {
        "concurrency": concurrency,
        "requests": len(results),
        "failed": sum(r["error"] is not None for r in results),
        "wall_s": wall,
        "throughput_tokens_per_s": tokens / wall if wall else 0.0,
        **delta.summary(),
        # llama.cpp says per response what it drafted: these sums must equal the counters' increase
        "requests_with_draft_counts": len(drafted),
        "request_draft_tokens": sum(int(r["draft_n"]) for r in drafted),
        "request_accepted": sum(int(r["draft_n_accepted"] or 0) for r in drafted),
    }
    return results, level


def answered_in_order(prompts, concurrency: int, ask: Callable, on_result: Callable[[dict], None] | None) -> list:
    """``ask`` for every prompt, ``concurrency`` at a time; each answer goes to ``on_result`` as it arrives. Ctrl-C
    cancels what has not started and leaves at once (the requests in flight end at their deadline) instead of
    waiting in the pool for every prompt, as map would."""
    pool = ThreadPoolExecutor(max_workers=concurrency)
    futures = {pool.submit(ask, p): i for i, p in enumerate(prompts)}
    results: list = [None] * len(prompts)
    try:
        for done in as_completed(futures):
            results[futures[done]] = done.result()
            if on_result:
                on_result(results[futures[done]])
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return results


def one_request(client: ServerClient, prompt, max_tokens: int, chat: bool = False, extra: dict | None = None) -> dict:
    """A request that fails (HTTP 400 when prompt + max_tokens exceed max_model_len, say) is recorded with the
    server's answer; its level carries on and keeps every other result."""
    t0 = time.perf_counter()
    try:
        return {"prompt": prompt, "error": None, **client.complete(prompt.text, max_tokens, chat, extra)}
    except PhoenixError as exc:
        return {
            "prompt": prompt,
            "error": str(exc),
            "latency_s": time.perf_counter() - t0,
            "prompt_tokens": 0,
            "output_tokens": 0,
            "text": "",
            "draft_n": None,
            "draft_n_accepted": None,
            "metrics": None,
        }


def _count(value) -> int:
    """A token count from a server: a whole non-negative number, or a ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return int(value)


def _completion(body: dict, chat: bool) -> dict:
    usage = body.get("usage") or {}
    choices = body.get("choices") or [{}]
    choice = choices[0] if isinstance(choices, list) and isinstance(choices[0], dict) else {}
    text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
    timings = body.get("timings") or {}  # llama.cpp: this request's own drafted and accepted tokens
    drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
    return {
        "prompt_tokens": _count(usage.get("prompt_tokens", 0)),
        "output_tokens": _count(usage.get("completion_tokens", 0)),
        "text": text if isinstance(text, str) else "",  # text: null is an empty answer, not a crash
        "draft_n": None if drafted is None else _count(drafted),
        "draft_n_accepted": None if accepted is None else _count(accepted),
        "metrics": body.get("metrics") if isinstance(body.get("metrics"), dict) else None,
        "token_ids": _ids(choice.get("token_ids")),  # vLLM with return_token_ids: the exact tokens it generated
        "usage": usage if isinstance(usage, dict) else {},  # the cached prompt tokens, where the engine says them
        "timings": timings if isinstance(timings, dict) else {},
    }


def _ids(value) -> list[int] | None:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return None
    return value


class _Stop(Exception):
    pass


def _connection(url: str, timeout_s: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _Stop(f"not an http(s) URL: {url!r}")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, parts.port, timeout=timeout_s), parts.path.rstrip("/").removesuffix("/v1")


def _chunk(line: bytes, chat: bool, out: dict, start: float) -> None:
    text = line.decode("utf-8", "replace").strip()
    if text == "data: [DONE]":
        out["_ended"] = True
        return
    if not text.startswith("data: "):
        return
    try:
        chunk = json.loads(text[6:])
    except ValueError:
        raise _Stop(f"a malformed chunk: {text[:80]!r}") from None
    if not isinstance(chunk, dict):
        raise _Stop(f"a chunk that is not an object: {text[:80]!r}")
    choices = chunk.get("choices") or []
    if isinstance(choices, list) and choices:  # vllm bench serve's TTFT: the first chunk with a choice, its text
        out["ttft_s"] = out["ttft_s"] or time.perf_counter() - start  # empty or not (a special token, a role)
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason"):
            out["_ended"] = True
        piece = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
        ids = _ids(choice.get("token_ids"))
        if ids is not None:
            out["token_ids"] = (out.get("token_ids") or []) + ids
        if isinstance(piece, str) and piece:
            out["text"] += piece
    for key in ("usage", "speculation", "timings", "metrics"):  # metrics: vLLM's per-request figures, last chunk
        if isinstance(chunk.get(key), dict):
            out[key] = chunk[key]


def stream_one(
    url: str,
    model: str,
    prompt: str,
    max_tokens: int,
    chat: bool,
    spec: dict | None,
    timeout_s: float,
    abort: threading.Event | None = None,
    extra: dict | None = None,
    api_key: str | None = None,
) -> dict:
    """Its text, time to first token, latency, usage and what the server said it drafted (Phoenix's
    ``speculation``, llama.cpp's ``timings``); ``error`` is one line where it failed. ``api_key`` goes as
    ``Authorization: Bearer KEY``."""
    body = request_body(model, prompt, max_tokens, chat, True, spec, extra)
    out: dict = {"text": "", "ttft_s": None, "usage": {}, "speculation": None, "timings": None, "metrics": None}
    out["error"] = None
    start = time.perf_counter()
    late = threading.Event()
    conn = None
    try:
        conn, base = _connection(url, timeout_s)
        conn.connect()  # its socket, kept: the response takes it over and the connection forgets it
        watchdog = threading.Timer(timeout_s - (time.perf_counter() - start), _cut, (conn.sock, late))
        watchdog.daemon = True
        watchdog.start()
        try:
            _exchange(conn, base, body, chat, out, start, abort, api_key)
        finally:
            watchdog.cancel()
    except _Stop as exc:  # a read the deadline cut ends the stream early: the deadline is the cause to name
        out["error"] = f"no complete answer within {timeout_s:g} s" if late.is_set() else str(exc)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out["error"] = f"no complete answer within {timeout_s:g} s" if late.is_set() else f"{type(exc).__name__}: {exc}"
    finally:
        if conn is not None:
            conn.close()
    if out["error"] is None and late.is_set():
        out["error"] = f"no complete answer within {timeout_s:g} s"
    out.pop("_ended", None)
    out["latency_s"] = time.perf_counter() - start
    return out


def _cut(sock: socket.socket | None, late: threading.Event) -> None:
    """The deadline passed: shut the socket, so the blocked read returns at once."""
    late.set()
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _exchange(conn, base: str, body: dict, chat: bool, out: dict, start: float, abort, api_key=None) -> None:
    path = base + ("/v1/chat/completions" if chat else "/v1/completions")
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    conn.request("POST", path, json.dumps(body).encode(), headers)
    resp = conn.getresponse()
    if resp.status != 200:
        raise _Stop(f"HTTP {resp.status}: {resp.read(300).decode(errors='replace')}")
    size, events = 0, 0
    while line := resp.readline(MAX_LINE + 1):
        size += len(line)
        if size > MAX_BYTES or len(line) > MAX_LINE:
            raise _Stop(f"the answer passed {MAX_BYTES >> 20} MB (or a line {MAX_LINE >> 20} MB): not read further")
        if abort is not None and abort.is_set():
            raise _Stop("the sweep was stopped")
        events += line.startswith(b"data: ")
        _chunk(line, chat, out, start)
    if not events:
        kind = resp.getheader("Content-Type") or "no Content-Type"
        raise _Stop(f"the server answered 200 with no server-sent events ({kind[:60]}): not an OpenAI stream")
    if not out.pop("_ended", False):  # a server (or a router before it) that died mid-stream: cut, not complete
        raise _Stop("the stream ended before its last chunk (no finish_reason, no [DONE]): the answer was cut")
