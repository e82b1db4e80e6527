"""A fleet as the dashboard shows it: the replicas `fleet start` ran (each its own live run, named by `--fleet`),
the router in front of them, each replica's load and prefix-cache hit rate over time, and the load runs measured
through the router beside what `fleet plan --validate` predicted for them. One definition for the page and the
docs; the hit rate is engine.analysis.prefix's."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from engine.analysis import prefix
from engine.analysis.prefix import summary as prefix_summary


@dataclass(frozen=True)
class Fleet:
    name: str
    policy: str  # the router's policy (cache_aware, power_of_two, round_robin)
    url: str  # the router's address, as a load client sent to it
    replicas: list  # the replicas' runs (db.entities.RunInfo), replica 0 first

    @property
    def target(self) -> str:
        return self.replicas[0].target if self.replicas else ""


def serve_config(info) -> dict:
    return (info.config or {}).get("phoenix_serve") or {}


def fleets(runs: list) -> list[Fleet]:
    """Every fleet among ``runs``: served runs that name a fleet, grouped by its name and router, newest first."""
    groups: dict[tuple[str, str], list] = {}
    for info in runs:
        cfg = serve_config(info)
        if cfg.get("fleet"):
            groups.setdefault((str(cfg["fleet"]), str(cfg.get("router") or "")), []).append(info)
    out = []
    for (name, router), members in groups.items():
        policy, _, url = router.partition("@")
        out.append(Fleet(name, policy or "unknown", url, sorted(members, key=lambda r: r.name)))
    return sorted(out, key=lambda f: -max(r.id for r in f.replicas))


def replica_row(info, requests: pd.DataFrame, prefix_rows: list) -> dict:
    """One replica's totals: requests it answered and failed, its prefix-cache hit rate and median TTFT."""
    answered = requests[requests["error"].isna()] if not requests.empty else requests
    cache = prefix_summary(prefix_rows)
    return {
        "replica": info.name,
        "run": info.id,
        "answered": len(answered),
        "failed": len(requests) - len(answered),
        "prefix hit rate": cache.hit_rate if cache else None,
        "prompt tokens from cache": cache.token_share if cache else None,
        "TTFT p50 (ms)": 1000 * float(answered["ttft_s"].median()) if len(answered) else None,
        "status": info.status,
    }


def load_over_time(steps: dict[str, pd.DataFrame], bucket_s: float = 5.0) -> pd.DataFrame:
    """Each replica's mean batch (requests running in a step) per ``bucket_s`` of its loop's clock."""
    frames = []
    for replica, frame in steps.items():
        if frame.empty:
            continue
        at = (frame["at_s"] // bucket_s) * bucket_s
        g = frame.groupby(at)["batch"].mean().reset_index()
        frames.append(g.rename(columns={"at_s": "seconds", "batch": "running"}).assign(replica=replica))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["seconds", "running", "replica"])


def hit_rate_over_time(requests: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Each replica's prefix-cache hit rate so far, request by request in the order it answered them."""
    frames = []
    for replica, frame in requests.items():
        if frame.empty:
            continue
        kept = frame[frame["error"].isna() & frame["cached_tokens"].notna()].sort_values("seq")
        if kept.empty:
            continue
        hits = kept["cached_tokens"].map(prefix.is_hit).cumsum()
        n = range(1, len(kept) + 1)
        frames.append(pd.DataFrame({"request": list(n), "hit rate so far": hits.to_numpy() / list(n)}).assign(
            replica=replica
        ))  # fmt: skip
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["request", "hit rate so far"])


def through_router(runs: list, fleet: Fleet) -> list:
    """The load runs a client sent through this fleet's router (`engines load --url` at its address) while its
    replicas ran: a later fleet on the same port is another fleet."""
    if not fleet.url:
        return []
    base = fleet.url.rstrip("/")
    began = min(r.created_at for r in fleet.replicas)
    ends = [r.finished_at for r in fleet.replicas]
    ended = None if any(e is None for e in ends) else max(ends)
    out = []
    for r in runs:
        sent = str(((r.config or {}).get("load") or {}).get("url") or "").rstrip("/")
        during = r.created_at >= began and (ended is None or r.created_at <= ended)
        if sent in (base, base + "/v1") and during:
            out.append(r)
    return out


def plan_against_measured(load_runs: list) -> pd.DataFrame:
    """What `fleet plan --validate` predicted for each load run through the router, beside what it measured."""
    rows = [row | {"run": r.id} for r in load_runs for row in ((r.config or {}).get("fleet_plan") or [])]
    return pd.DataFrame(rows)
