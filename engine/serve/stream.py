"""One streamed greedy request to an OpenAI-compatible server, bounded in time and in size.

``timeout_s`` is a deadline for the whole request, not a per-read timeout: a watchdog shuts the socket when it
passes, so a server that sends a byte a second cannot hold a sweep. The answer may take at most ``MAX_BYTES``,
a line at most ``MAX_LINE``. An ``abort`` event (the sweep was stopped) ends the request at its next chunk. Every
way it can go wrong (refused, HTTP error, malformed chunk, too big, too slow) is one line in ``error``; the text
and timings received before it are kept.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse

MAX_BYTES = 16 << 20  # a streamed answer of 96-1,024 tokens is a few hundred kB
MAX_LINE = 1 << 20


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
    if not text.startswith("data: ") or text == "data: [DONE]":
        return
    try:
        chunk = json.loads(text[6:])
    except ValueError:
        raise _Stop(f"a malformed chunk: {text[:80]!r}") from None
    if not isinstance(chunk, dict):
        raise _Stop(f"a chunk that is not an object: {text[:80]!r}")
    choices = chunk.get("choices") or []
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        piece = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
        if isinstance(piece, str) and piece:
            out["ttft_s"] = out["ttft_s"] or time.perf_counter() - start
            out["text"] += piece
    for key in ("usage", "speculation", "timings"):
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
) -> dict:
    """Its text, time to first token, latency, usage and what the server said it drafted (Phoenix's
    ``speculation``, llama.cpp's ``timings``); ``error`` is one line where it failed."""
    body: dict = {"model": model, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    body["stream_options"] = {"include_usage": True}
    body.update({"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt})
    if spec is not None:
        body["speculation"] = spec
    out: dict = {"text": "", "ttft_s": None, "usage": {}, "speculation": None, "timings": None, "error": None}
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
            _exchange(conn, base, body, chat, out, start, abort)
        finally:
            watchdog.cancel()
    except _Stop as exc:
        out["error"] = str(exc)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out["error"] = f"no complete answer within {timeout_s:g} s" if late.is_set() else f"{type(exc).__name__}: {exc}"
    finally:
        if conn is not None:
            conn.close()
    if out["error"] is None and late.is_set():
        out["error"] = f"no complete answer within {timeout_s:g} s"
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


def _exchange(conn, base: str, body: dict, chat: bool, out: dict, start: float, abort) -> None:
    path = base + ("/v1/chat/completions" if chat else "/v1/completions")
    conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
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
