"""Load in the field's terms, with `vllm bench serve`'s definitions (vllm/benchmarks/serve.py), computed here once.

Arrivals: at a request rate r (requests/s), gaps are gamma-distributed with shape ``burstiness`` and mean 1/r
(burstiness 1 is a Poisson process; below 1 burstier, above 1 more regular); ``inf`` sends every request at once.
A concurrency cap holds a request back until one in flight ends, and its clock starts when it is sent.

Per request: TTFT is the time to the first streamed token; TPOT = (latency - TTFT) / (output tokens - 1), for
requests of more than one token (both as engine.analysis.load defines them for every serving page); E2EL is the
latency. Per level: output throughput = output tokens of the answered
requests / the level's wall time; request throughput = answered / wall; goodput = the requests that met every SLO
given / wall. A refused request (429, 4xx, a timeout) is counted as failed, never averaged in as 0 tok/s.
"""

from __future__ import annotations

import math
import random
import re

import pandas as pd

from engine.analysis import load, prefix
from engine.errors import PhoenixError

SLO_KEYS = ("ttft", "tpot", "e2el")  # milliseconds, as vllm bench serve's --goodput takes them


def rates_of(text: str, flag: str = "--request-rate") -> list[float]:
    """'1,2,4,inf' as request rates (requests per second); inf sends all at once. ``flag`` names the option in the
    one-line refusal (`fleet plan` calls it --rate)."""
    out = []
    for part in [p.strip() for p in (text or "").split(",") if p.strip()]:
        try:
            rate = math.inf if part == "inf" else float(part)
        except ValueError:
            raise PhoenixError(f"{flag}: {part!r} is not a number of requests per second or inf") from None
        if not (rate > 0) or (math.isinf(rate) and part != "inf") or (math.isfinite(rate) and rate > 1e6):
            field = flag.lstrip("-").replace("-", "_")
            raise PhoenixError(f"{flag} must be above 0 (or inf), got {part!r}", field=field)
        out.append(rate)
    return out


def arrival_times(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """When each of ``n`` requests is sent, in seconds from the level's start; the first at 0."""
    if not (0 < burstiness <= 100):
        raise PhoenixError(f"--burstiness must be in (0, 100], got {burstiness}", field="burstiness")
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)
    times, t = [], 0.0
    for _ in range(n):
        times.append(t)
        t += rng.gammavariate(burstiness, theta)
    return times


def slos_of(text: str) -> dict[str, float]:
    """'ttft:500,tpot:50' as {'ttft': 500.0, 'tpot': 50.0} (milliseconds), vllm bench serve's --goodput."""
    out: dict[str, float] = {}
    if text and not text.strip(" ,"):  # "," once meant "no SLOs" without a word
        raise PhoenixError(f"--goodput: {text!r} names no SLO; e.g. ttft:500,tpot:50, or leave it out", field="goodput")
    for part in [p.strip() for p in re.split(r"[ ,]", text or "") if p.strip()]:
        key, sep, value = part.partition(":")
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if not sep or key not in SLO_KEYS or not (0 < ms < 1e9) or key in out:
            raise PhoenixError(
                f"--goodput: {part!r} is not <ttft|tpot|e2el>:<milliseconds>, each once", field="goodput"
            )
        out[key] = ms
    return out


def tpot_s(latency_s: float, ttft_s: float | None, output_tokens: int) -> float | None:
    """One request's TPOT, by engine.analysis.load's definition (the serving pages' one)."""
    frame = pd.DataFrame({"latency_s": [latency_s], "ttft_s": [ttft_s], "output_tokens": [output_tokens]})
    value = load.tpot(frame).iloc[0]
    return None if pd.isna(value) else float(value)


def figures(rows: list, wall_s: float, slos: dict[str, float]) -> dict:
    """One variant's figures at one level from its request rows (``RequestRecord``s, warm-ups left out). TTFT and
    TPOT are engine.analysis.load's (the serving pages' definitions and percentiles), in milliseconds."""
    ok = [r for r in rows if r.error is None]
    frame = pd.DataFrame(
        {
            "latency_s": [r.latency_s for r in ok],
            "ttft_s": [r.ttft_s for r in ok],
            "output_tokens": [r.output_tokens for r in ok],
        },
        dtype=float,
    )
    ttft, tpot, e2el = frame["ttft_s"] * 1000, load.tpot(frame) * 1000, frame["latency_s"] * 1000
    good = sum(1 for r in ok if _meets(r, slos)) if slos else None
    tokens = int(frame["output_tokens"].sum())
    return {
        "requests": len(rows),
        "answered": len(ok),
        "failed": len(rows) - len(ok),
        "wall_s": wall_s,
        "output_throughput": tokens / wall_s if wall_s > 0 else 0.0,
        "request_throughput": len(ok) / wall_s if wall_s > 0 else 0.0,
        "ttft_ms_mean": _mean(ttft),
        "ttft_ms_p50": load.pct(ttft, 50),
        "ttft_ms_p95": load.pct(ttft, 95),
        "tpot_ms_mean": _mean(tpot),
        "tpot_ms_p50": load.pct(tpot, 50),
        "tpot_ms_p95": load.pct(tpot, 95),
        "e2el_ms_p50": load.pct(e2el, 50),
        "goodput": good / wall_s if good is not None and wall_s > 0 else None,
        "good_requests": good,
        "slos_ms": slos or None,
        **cached_share(ok),
    }


def cached_share(rows: list) -> dict:
    """What the server's prefix cache served of the answered requests' prompts (engine.analysis.prefix, the one
    definition): cached and prompt tokens and their share; None where the server reported no cache figure for some
    row (unknown, never taken as 0)."""
    pairs: list[tuple[int | None, int, float | None]] = [
        (getattr(r, "cached_tokens", None), getattr(r, "prompt_tokens", 0) or 0, None) for r in rows
    ]
    found = prefix.summary(pairs) if all(c is not None for c, _, _ in pairs) else None
    if found is None:
        return {"cached_tokens": None, "prompt_tokens": sum(p for _, p, _ in pairs), "cached_share": None}
    return {
        "cached_tokens": found.cached_tokens,
        "prompt_tokens": found.prompt_tokens,
        "cached_share": found.token_share,
    }


def _mean(values: pd.Series) -> float | None:
    v = values.dropna()
    return float(v.mean()) if len(v) else None


def _meets(r, slos: dict[str, float]) -> bool:
    values = {"ttft": r.ttft_s, "tpot": tpot_s(r.latency_s, r.ttft_s, r.output_tokens), "e2el": r.latency_s}
    for key, limit in slos.items():
        v = values[key]
        if key == "tpot" and v is None and r.output_tokens < 2:  # vLLM: a one-token answer has no TPOT to miss
            continue
        if v is None or v * 1000 > limit:
            return False
    return True
