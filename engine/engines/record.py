"""Recording vLLM sweeps and watches as Phoenix runs (the CLI is a thin layer over these)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict

from db.connect import safe_url
from db.entities import RequestRecord, WatchInterval
from db.store import Store
from engine.engines.client import GREEDY, ServerClient, sweep_level
from engine.engines.config import SweepConfig, WatchConfig
from engine.engines.counters import SpecCounters
from engine.engines.llamacpp import command_at
from engine.engines.rows import row_of
from engine.errors import PhoenixError
from engine.prompts.sets import load as load_prompts
from engine.provenance import environment
from engine.queue.owned import owned


def client_for(url: str, model: str, timeout_s: float = 600.0, extra: dict | None = None) -> ServerClient:
    key = os.environ.get("VLLM_API_KEY")  # the key is never printed nor stored
    return ServerClient(url, model, timeout_s, api_key=key, extra=extra)


def check_timeout(timeout_s: float) -> float:
    """A deadline a request can have: a positive number of seconds up to a day (not -1, 0 or NaN)."""
    if not (0 < timeout_s <= 86400):
        raise PhoenixError(f"--timeout-s must be above 0 and at most 86400 seconds, got {timeout_s}", field="timeout_s")
    return timeout_s


def stored(cfg) -> dict:
    """A config as a run keeps it: any password in its URL hidden (db.connect.safe_url, the one function for it)."""
    out = asdict(cfg)
    if isinstance(out.get("url"), str):
        out["url"] = safe_url(out["url"])
    if "api_key" in out:  # a secret: only whether one was sent
        out["api_key"] = "set" if out["api_key"] else None
    return out


def levels_of(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise PhoenixError(f"--concurrency must be comma-separated whole numbers, got {text!r}") from None
    if not levels or any(c < 1 or c > 1024 for c in levels):
        raise PhoenixError(f"--concurrency levels must be in 1..1024, got {text!r}")
    if len(set(levels)) != len(levels):  # 1,1 once ran the level twice, as two levels of one sweep
        raise PhoenixError(f"--concurrency names a level twice: {text!r}", field="concurrency")
    return levels


def launched(url: str) -> dict:
    """For a llama-server that `python -m engine llamacpp start` runs at ``url``: its exact command line."""
    command = command_at(url)
    return {"command": command} if command else {}


def sweep(store: Store, cfg: SweepConfig, on_level: Callable[[dict], None] | None = None) -> int:
    """One run; requests are recorded per level as mode '<engine>_c<level>', level counters in the run config."""
    levels = levels_of(cfg.concurrency)
    check_timeout(cfg.timeout_s)
    if not cfg.model:
        raise PhoenixError("--model is required: the served model name (see the server's /v1/models)")
    # a second turn's context is the engine's own first answer, which a concurrent sweep does not have: first turns only
    prompts = [p for p in load_prompts(cfg.prompts, cfg.limit) if p.parent is None]
    client = client_for(cfg.url, cfg.model, cfg.timeout_s)
    client.metrics()  # fail before writing anything if the server or its /metrics is unreachable
    served = {**client.identity(cfg.engine), **launched(cfg.url)}
    engine = served["engine"]
    run = store.create_run(
        cfg.name or f"{engine} sweep {cfg.concurrency}",
        {"serve": stored(cfg), "engine": served, "sampling": GREEDY, "environment": environment()},
        cfg.model,
        None,
        len(prompts) * len(levels),
    )
    seq, summary, k = 0, [], 0
    with owned(store, run.id):  # heartbeat; Ctrl-C or SIGTERM: interrupted; an error: failed, with its line
        for c in levels:
            answered: list[dict] = []
            try:
                results, level = sweep_level(client, prompts, c, cfg.max_new_tokens, on_result=answered.append)
            except BaseException:
                # the level did not finish (Ctrl-C, a server gone with its /metrics): every answer it got is kept,
                # under the k the last whole level measured (the counters that would say it never came)
                recs = [request_row(run.id, seq + i, f"{engine}_c{c}", k, r) for i, r in enumerate(answered)]
                if recs:
                    store.add_requests(recs, progress=(run.id, seq + len(recs)))
                    cut = {"concurrency": c, "recorded": len(recs), "of": len(prompts)}
                    store.merge_config(run.id, {"cut_level": cut})
                raise
            k = len(level["per_position"])
            recs = [request_row(run.id, seq + i, f"{engine}_c{c}", k, r) for i, r in enumerate(results)]
            seq += len(recs)
            summary.append(level)
            store.merge_config(run.id, {"vllm_levels": summary})
            store.add_requests(recs, progress=(run.id, seq))
            if on_level:
                on_level(level)
            if level["failed"] == level["requests"]:  # nothing got through: a wrong model name, a dead backend
                raise PhoenixError(f"every request at concurrency {c} failed; the first: {results[0]['error']}")
    store.set_status(run.id, "done")
    return run.id


def request_row(run_id: int, seq: int, mode: str, k: int, r: dict) -> RequestRecord:
    """One request of a sweep or a side-by-side run (engine.engines.rows builds every such row)."""
    return row_of(run_id, seq, mode, r["prompt"], r, k)


def watch(store: Store, cfg: WatchConfig, sleep: Callable[[float], None] = time.sleep) -> int:
    """Each interval becomes one watch interval of the run (db: watch_intervals): the counters' deltas."""
    if cfg.interval_s <= 0:
        raise PhoenixError(f"--interval-s must be positive, got {cfg.interval_s}")
    if cfg.samples is not None and cfg.samples < 1:
        raise PhoenixError(f"--samples must be 1 or more (or left out: until Ctrl-C), got {cfg.samples}")
    client = client_for(cfg.url, cfg.model or "watched")
    prev, t_prev = client.metrics(), time.perf_counter()
    served = {**client.identity(cfg.engine), **launched(cfg.url)}
    run = store.create_run(
        cfg.name or f"{served['engine']} watch {cfg.url}",
        {"serve_watch": stored(cfg), "engine": served, "environment": environment()},
        cfg.model or cfg.url,
        None,
        cfg.samples or 0,
    )
    n = 0
    with owned(store, run.id):
        try:
            while cfg.samples is None or n < cfg.samples:
                sleep(cfg.interval_s)
                now, t_now = client.metrics(), time.perf_counter()
                store.add_interval(run.id, _interval(n, now.minus(prev), t_now - t_prev))
                prev, t_prev, n = now, t_now, n + 1
        except KeyboardInterrupt:
            pass  # Ctrl-C (or SIGTERM) is how a watch ends; every interval so far is kept
    store.set_status(run.id, "done")
    return run.id


def _interval(seq: int, d: SpecCounters, seconds: float) -> WatchInterval:
    drafts = int(round(d.drafts))
    return WatchInterval(
        seq=seq,
        seconds=seconds,
        drafts=drafts,
        draft_tokens=int(round(d.draft_tokens)),
        accepted=int(round(d.accepted)),
        generation_tokens=int(round(d.generation_tokens)),
        per_position=[int(round(v)) for _, v in sorted(d.per_pos.items())],
    )
