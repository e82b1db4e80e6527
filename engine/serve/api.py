"""Phoenix's OpenAI-compatible HTTP API, on the stack vLLM's server uses (FastAPI, uvicorn).

``/v1/completions`` and ``/v1/chat/completions`` (streamed as server-sent events in OpenAI's chunk format, or
whole), ``/v1/models``, ``/health`` and ``/metrics``. Greedy by default, sampled exactly in distribution with a
temperature (engine.decode.sampling), with stop strings and token ids, seeds and logprobs. Each response carries
``speculation``: what speculation did for that request (its arms, proposed and accepted tokens, per-position counts,
queue wait, prefill, draft and verify time, batch), and vLLM's per-request ``metrics``. A request may set its own
with ``"speculation": {"drafter": "none"}`` or ``{"k": 3}``; every request field is listed in docs/serving.md.

Every bad request gets an OpenAI-style error body with a 4xx and one log line, and the server goes on; a client
that goes away frees its row at the next step; beyond ``--max-queue`` waiting requests the answer is 429.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager

import torch
from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.decode.client import RequestStream
from engine.decode.sampling import TokenLogprob
from engine.decode.sequence import Finished, QueueFull, Request
from engine.preload import preloaded
from engine.provenance import git_sha
from engine.serve.detokenize import Detokenizer, StopStrings
from engine.serve.parse import (
    ApiError,
    cache_salt_of,
    check_fields,
    flag,
    include_usage,
    max_tokens,
    prompt_ids,
    read_body,
    sampling_of,
    speculation_of,
    stops_of,
)
from engine.serve.render import chunk, finish_reason, logprobs_body, request_metrics, response_body, usage
from engine.serve.service import Service

log = logging.getLogger("phoenix.serve")
SETTINGS = ("max_batch", "prefix_cache_gb", "k_max", "runner", "pack", "max_num_batched_tokens")


def error_response(status: int, message: str, param: str | None = None, code: str | None = None, headers=None):
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def make_app(service: Service, manage: bool = True) -> FastAPI:
    """``manage``: the app starts and stops the service itself (its loop on a thread of its own: tests, embedding);
    the command-line server starts it before uvicorn and runs the loop on the main thread (``engine.cli.serving``)."""

    @asynccontextmanager
    async def lifespan(_app):
        if manage:
            await asyncio.to_thread(service.start)
            log.info(ready_line(service))
        yield
        if manage:
            await asyncio.to_thread(service.stop)  # uvicorn lets requests in flight finish first, then this drains

    app = FastAPI(title="Phoenix", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(ApiError)
    async def _api_error(request: HttpRequest, exc: ApiError):
        (log.info if exc.status == 499 else log.warning)("%d %s: %s", exc.status, request.url.path, exc.message)
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        return error_response(exc.status, exc.message, exc.param, exc.code, headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(
        request: HttpRequest, exc: StarletteHTTPException
    ):  # 404, 405: an OpenAI body, not {"detail"}
        log.warning("%d %s: %s", exc.status_code, request.url.path, exc.detail)
        return error_response(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}")

    @app.exception_handler(Exception)
    async def _crash(request: HttpRequest, exc: Exception):
        log.error("500 %s: %s: %s", request.url.path, type(exc).__name__, exc)
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}")

    @app.get("/health")
    async def health():
        rows, waiting = service.scheduler.load
        if service.dead:  # the decoding loop stopped for good: a router takes this server out
            return error_response(503, f"the decoding loop stopped: {service.dead}", code="loop_stopped")
        recorder = service.recorder.health() if service.recorder is not None else None
        if recorder is not None and "refusing" in recorder:  # out of the rotation until it can record again
            why = f"the server cannot record requests now: {recorder['refusing']}"
            return error_response(503, why, code="recorder")
        return {
            "status": "ok",
            "engine": "phoenix",
            "drafter": service.drafter,
            "draft": service.draft,  # the draft model or head it loaded, by name (no path): part of a load run's spec
            "k_max": service.cfg.k_max,
            "version": git_sha() or "unknown",
            "rows": rows,
            "waiting": waiting,
            "run_id": service.run_id,
            "dtype": service.decoder.pair.dtype,  # what a load client's run states of the forward it measured
            "threads": torch.get_num_threads(),
            "preload": preloaded(),  # the allocator it runs with (engine.preload): part of what a load run measured
            # what a load run states of the server, its decode attention included (a forward path: a series apart)
            "settings": {**{k: getattr(service.cfg, k) for k in SETTINGS}, "attention": service.attention},
            "cpu_s": round(time.process_time(), 3),  # the process's CPU seconds: a load client's cost per token
            **service.stats,
            **({"prefix_cache": service.scheduler.prefix.health()} if service.scheduler.prefix else {}),
            **({"recorder": recorder} if recorder is not None else {}),
        }

    @app.get("/live")
    async def live():
        """Liveness: the process answers and its decoding loop runs (a dead loop never recovers: restart it)."""
        if service.dead:
            return error_response(503, f"the decoding loop stopped: {service.dead}", code="loop_stopped")
        return {"status": "alive"}

    @app.get("/ready")
    async def ready():
        """Readiness, apart from liveness: warm and taking requests. Not ready while it drains after SIGTERM or
        cannot record (a router takes it out of the rotation and brings it back when it can)."""
        why = service.not_ready()
        if why is not None:
            return error_response(503, why, code="not_ready")
        return {"status": "ready", "run_id": service.run_id}

    @app.get("/v1/models")
    async def models(request: HttpRequest):
        check_key(service, request)
        pair = service.decoder.pair
        ctx = getattr(pair.target.config, "max_position_embeddings", None)
        return {
            "object": "list",
            "data": [{"id": service.model_name, "object": "model", "owned_by": "phoenix", "max_model_len": ctx}],
        }

    @app.get("/metrics")
    async def metrics():
        service.gauges()
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/completions")
    async def completions(request: HttpRequest):
        return await generate(service, request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: HttpRequest):
        return await generate(service, request, chat=True)

    return app


def ready_line(service: Service) -> str:
    cfg, pair = service.cfg, service.decoder.pair
    return (
        f"Phoenix serves {service.model_name} at http://{cfg.host}:{cfg.port}/v1 (drafter {service.drafter}, draft "
        f"{cfg.draft or 'none'}, {pair.dtype}, max batch {cfg.max_batch}, weights {service.packed}, forward "
        f"{pair.runner}, preloaded {preloaded() or 'nothing'}, ready after {sum(service.startup_s.values()):.0f} s "
        f"of warming and profiling, run "
        f"#{service.run_id}); Ctrl-C or SIGTERM drains and stops"
    )


def check_key(service: Service, request: HttpRequest) -> None:
    """--api-key, checked in each /v1 endpoint: an HTTP middleware would hide the client's disconnect from
    ``is_disconnected`` (Starlette's BaseHTTPMiddleware), and a whole response would decode on for nobody."""
    key = service.cfg.api_key
    if not key:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    # the scheme is case-insensitive (RFC 6750, 2.1), and the key is compared in constant time
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), key.encode()):
        raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer KEY'")


async def generate(service: Service, request: HttpRequest, chat: bool):
    check_key(service, request)
    body = await read_body(request)
    model = body.get("model")
    if model is not None and model != service.model_name:
        raise ApiError(
            404,
            f"the model {model!r} does not exist here: this server has {service.model_name!r}",
            param="model",
            code="model_not_found",
        )
    check_fields(body)
    sampling, stops, with_usage = sampling_of(service, body, chat), stops_of(body), include_usage(body)
    keep_stop, ignore_eos = flag(body, "include_stop_str_in_output"), flag(body, "ignore_eos")
    ids = await asyncio.to_thread(prompt_ids, service, body, chat)  # tokenizing off the event loop: /health answers
    if not ids:
        raise ApiError(400, "the prompt encodes to no tokens: send some text", param="prompt")
    n_new = max_tokens(service, body, chat, len(ids))
    drafter, k = speculation_of(service, body)
    stop = StopStrings(service.decoder.pair.tokenizer, stops, keep_stop) if stops else None
    req = Request(ids, n_new, drafter, k, sampling.resolved(), stop, ignore_eos, uuid.uuid4().hex, cache_salt_of(body))
    try:
        stream = service.submit(req, tokens=bool(body.get("stream")))
    except QueueFull as exc:
        service.count("refused")
        raise ApiError(429, f"the server is full: {exc}; retry shortly", code="queue_full") from None
    except RuntimeError as exc:  # the decoding loop stopped for good, or the recorder cannot record
        raise ApiError(503, str(exc), code="unavailable") from None
    created = int(time.time())
    if body.get("stream"):
        out = Stream(service, req, chat, created, stop, with_usage)
        service.answered(+1)  # until the stream's last event is sent (Stream.events)
        return StreamingResponse(out.events(stream), media_type="text/event-stream")
    service.answered(+1)
    try:
        finished = await wait_done(request, service, stream)
    finally:
        service.answered(-1)
    if finished is None:
        return Response(status_code=499)  # the client went away; its row is already free
    if finished.reason == "aborted":  # a shutdown's deadline or second signal ended it: an OpenAI body, recorded
        return error_response(503, f"the request was ended: {finished.error}", code="aborted")
    if finished.failed:  # its step failed (the log has the line): an OpenAI 500 body; the loop goes on
        return error_response(500, f"decoding failed: {finished.error}", code=finished.reason)
    text = service.decoder.text(finished.stats)
    return JSONResponse(response_body(service, finished, chat, created, stop.cut(text) if stop else text))


async def wait_done(request: HttpRequest, service: Service, stream: RequestStream) -> Finished | None:
    """The finished request, or None once its client went away (checked every half second, whatever arrives: a
    check made only when no event came was never made while tokens flowed, and a whole response decoded on for
    nobody)."""
    while True:
        output = await stream.get(timeout_s=0.5)
        if output is not None and output.finished is not None:
            return output.finished
        if await request.is_disconnected():
            service.client.abort(stream.request)
            return None


class Stream:
    """Server-sent events: a chunk per step that added text (held back while it might begin a stop string; never
    past one), then the finish reason, then, when the request asked for it (``stream_options.include_usage``), a
    usage chunk without choices (with ``continuous_usage_stats``, every chunk carries the usage so far, as vLLM's
    do); what speculation did (``speculation``, vLLM's ``metrics``) rides on the last
    chunk; then [DONE]. A client that goes away cancels the request."""

    def __init__(self, service: Service, req: Request, chat: bool, created: int, stop, with_usage: tuple[bool, bool]):
        self.service, self.req, self.chat, self.created = service, req, chat, created
        self.stop, (self.with_usage, self.continuous) = stop, with_usage
        self.generated = 0  # tokens decoded so far (the continuous usage's completion_tokens)
        self.text = Detokenizer(service.decoder.pair.tokenizer)
        self.decoded, self.sent = "", ""  # the text so far, and what of it was sent
        self.scored: list[TokenLogprob] = []  # logprobs not sent yet

    def _chunk(self, delta: dict | None, reason=None, **extra) -> str:
        if self.continuous and "usage" not in extra:
            n = len(self.req.prompt_ids)
            extra["usage"] = {
                "prompt_tokens": n,
                "completion_tokens": self.generated,
                "total_tokens": n + self.generated,
            }
        return chunk(self.service, self.req, self.chat, self.created, delta, reason, **extra)

    def _logprobs(self, offset: int) -> dict | None:
        """The logprobs not sent yet; ``offset``: the text sent before this chunk's (text_offset counts from it)."""
        lps, self.scored = self.scored, []
        return logprobs_body(self.service.decoder.pair.tokenizer, lps, self.chat, offset)

    def _sendable(self) -> str:
        if self.stop is None:
            return self.decoded
        cut = self.stop.cut(self.decoded)
        return cut if len(cut) < len(self.decoded) else self.decoded[: len(self.decoded) - self.stop.holdback]

    def _delta(self, upto: str) -> str:
        delta = upto[len(self.sent) :] if upto.startswith(self.sent) and len(upto) > len(self.sent) else ""
        self.sent += delta
        return delta

    async def events(self, stream: RequestStream):
        done = False
        role = self.chat  # the role chunk goes out with the first output, as vLLM's does: sent at once, vLLM's client
        try:  # (which times a stream's first chunk) read Phoenix's TTFT as 10 ms against its own client's 383
            while True:
                output = await stream.get()
                assert output is not None  # no timeout: an output
                if role:
                    role = False
                    yield self._chunk({"role": "assistant"})
                if output.finished is None:
                    self.generated += len(output.tokens)
                    self.decoded += self.text.add(output.tokens)
                    self.scored += output.logprobs
                    offset = len(self.sent)
                    delta = self._delta(self._sendable())
                    if delta:
                        yield self._chunk({"content": delta}, logprobs=self._logprobs(offset))
                    continue
                done = True
                for event in self._end(output.finished):
                    yield event
                return
        finally:
            self.service.answered(-1)
            if not done:
                self.service.client.abort(self.req)

    def _end(self, f: Finished) -> list[str]:
        if f.failed:  # an OpenAI error event, then the end of the stream
            body = {"error": {"message": f"decoding failed: {f.error}", "type": "server_error", "code": f.reason}}
            return [f"data: {json.dumps(body)}\n\n", "data: [DONE]\n\n"]
        full = self.service.decoder.text(f.stats)
        offset = len(self.sent)
        tail = self._delta(self.stop.cut(full) if self.stop else full)
        spec = {"speculation": self.service.speculation(f), "metrics": request_metrics(self.service, f)}
        self.generated = f.stats.output_tokens
        last = self._chunk(
            {"content": tail} if tail else {},
            finish_reason(f),
            logprobs=self._logprobs(offset),
            stop_reason=f.stop_reason,
            **({} if self.with_usage else spec),
        )
        out = [last]
        if self.with_usage:
            out.append(self._chunk(None, usage=usage(f), **spec))
        return out + ["data: [DONE]\n\n"]
