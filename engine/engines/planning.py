"""`fleet plan`: the replica count and speculation setting that meet an SLO at a request rate, predicted from one
replica's measured steps (engine.analysis.fleet_plan), with the plan's error against fleets measured here beside it.
"""

from __future__ import annotations

import json
import os

import pandas as pd

from db.store import Store
from engine.analysis import fleet_plan as fp
from engine.engines.arrivals import rates_of, slos_of
from engine.engines.config import PlanConfig
from engine.engines.replicas import threads_each
from engine.errors import PhoenixError


def _ints(text: str, flag: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise PhoenixError(f"{flag} takes whole numbers separated by commas, got {text!r}") from None
    if not out or min(out) < 1:
        raise PhoenixError(f"{flag} needs at least one number of 1 or more, got {text!r}")
    return out


def _rates(text: str) -> list[float]:
    """The plan's rates, read as `engines load --request-rate` reads them (NaN and 0 refused)."""
    out = rates_of(text, "--rate")
    if not out:
        raise PhoenixError(f"--rate needs at least one rate above 0 (or inf), got {text!r}")
    return out


def load_profile(store: Store, run_ids: list[int]) -> tuple[fp.Profile, fp.Workload]:
    """The step-cost fit from the runs' serve_steps; the workload (prompt and output tokens) from their requests."""
    frames, threads = [], 0
    for run_id in run_ids:
        info = store.get_run(run_id)
        if info is None:
            raise PhoenixError(f"--source: no run #{run_id}")
        frames.append(store.serve_steps_frame(run_id))
        threads = threads or int(((info.config or {}).get("environment") or {}).get("threads") or 0)
    steps = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if steps.empty:
        raise PhoenixError(f"--source {','.join(map(str, run_ids))}: no steps recorded (a Phoenix server's own run)")
    rows = [r for i in run_ids for r in store.requests(i) if not r.error and r.prefill_s]
    prefills = [(r.prompt_tokens, float(r.prefill_s or 0.0)) for r in rows]
    profile = fp.fit_profile(steps, prefills, threads or (os.cpu_count() or 1))
    return profile, workload(store, run_ids)


def workload(store: Store, run_ids: list[int]) -> fp.Workload:
    rows = [r for i in run_ids for r in store.requests(i) if not r.error and r.output_tokens > 0]
    if not rows:
        raise PhoenixError("no answered request to draw the workload from")
    return fp.Workload([r.prompt_tokens for r in rows], [r.output_tokens for r in rows])


MAX_REPLICAS = 16  # fleet start's bound
MAX_BATCH = 256  # serve's bound on --max-batch
MAX_REQUESTS = 10_000  # requests per simulated sitting: enough for a stable median, bounded in time
MAX_RATE = 1e4  # requests/s a plan prices (a finite rate past this is no load this machine serves)


def check_plan(cfg: PlanConfig) -> None:
    """Every setting of a plan checked before any work, each refusal one line with the bounds `fleet start` and
    `serve` use (a 0 once crashed the simulation; 100,000 replicas simulated without end)."""
    if not 1 <= cfg.requests <= MAX_REQUESTS:
        raise PhoenixError(f"--requests must be in 1..{MAX_REQUESTS}, got {cfg.requests}", field="requests")
    if not 1 <= cfg.max_batch <= MAX_BATCH:
        raise PhoenixError(f"--max-batch must be in 1..{MAX_BATCH} (as serve's), got {cfg.max_batch}", "max_batch")
    for n in _ints(cfg.replicas, "--replicas"):
        if n > MAX_REPLICAS:
            raise PhoenixError(f"--replicas must be in 1..{MAX_REPLICAS} (as fleet start's), got {n}", "replicas")
    for rate in _rates(cfg.rate):
        if rate != float("inf") and rate > MAX_RATE:
            raise PhoenixError(f"--rate must be at most {MAX_RATE:g} requests/s (or inf), got {rate:g}", "rate")
    if cfg.slo:
        try:
            slos_of(cfg.slo)
        except PhoenixError as exc:
            raise PhoenixError(str(exc).replace("--goodput", "--slo"), field="slo") from None
    for item in (x for x in cfg.validate.split(",") if x.strip()):
        run_text, _, n_text = item.partition(":")
        _ints(run_text, "--validate")
        n = _ints(n_text or "1", "--validate (LOADRUN:REPLICAS)")[0]
        if n > MAX_REPLICAS:
            raise PhoenixError(f"--validate {item}: replicas must be in 1..{MAX_REPLICAS}", field="validate")


def plan(store: Store, cfg: PlanConfig) -> tuple[pd.DataFrame, fp.Predicted | None]:
    """Every (replicas, setting, rate) priced; the cheapest meeting the SLO where one is given."""
    check_plan(cfg)
    profile, work = load_profile(store, _ints(cfg.source, "--source"))
    slo = slos_of(cfg.slo) if cfg.slo else {}
    preds = []
    for n in _ints(cfg.replicas, "--replicas"):
        each = threads_each(n) if cfg.same_machine else profile.threads
        for rate in _rates(cfg.rate):
            for setting in sorted(profile.per_pass):
                preds.append(fp.predict(profile, setting, n, rate, work, cfg.requests, max_batch=cfg.max_batch,
                                        threads_each=each))  # fmt: skip
    table = pd.DataFrame([vars(p) for p in preds])
    if slo:
        table["meets SLO"] = [fp.meets(p, slo) for p in preds]
    return table, (fp.cheapest(preds, slo) if slo else None)


def validation(store: Store, cfg: PlanConfig) -> pd.DataFrame:
    """Each measured fleet level beside the plan's prediction for it: throughput and p50 TTFT, and their errors."""
    profile, _ = load_profile(store, _ints(cfg.source, "--source"))
    out = []
    for item in (x for x in cfg.validate.split(",") if x.strip()):
        run_text, _, n_text = item.partition(":")
        run_id, replicas = _ints(run_text, "--validate")[0], _ints(n_text or "1", "--validate")[0]
        info = store.get_run(run_id)
        if info is None:
            raise PhoenixError(f"--validate: no run #{run_id}")
        rate = float(info.config.get("request_rate") or "inf")
        work = workload(store, [run_id])
        drafting = [s for s in profile.per_pass if s != "none"]
        for variant, fig in (info.config.get("figures") or {}).items():
            if variant != "none" and len(drafting) != 1:
                continue  # which measured setting a drafting variant ran is unambiguous only where the replica ran one
            setting = "none" if variant == "none" else drafting[0]
            n = int(fig.get("answered") or len(work.output_tokens))
            pred = fp.predict(
                profile, setting, replicas, rate, work, n, max_batch=cfg.max_batch, threads_each=threads_each(replicas)
            )
            out.append({
                "run": run_id, "replicas": replicas, "rate": rate, "variant": variant,
                "tok/s measured": fig["output_throughput"], "tok/s predicted": pred.output_throughput,
                "tok/s error": fp.error(pred.output_throughput, fig["output_throughput"]),
                "TTFT p50 measured (ms)": fig["ttft_ms_p50"], "TTFT p50 predicted (ms)": pred.ttft_ms_p50,
                "TTFT error": fp.error(pred.ttft_ms_p50, fig["ttft_ms_p50"]),
            })  # fmt: skip
    return pd.DataFrame(out)


def record_validation(store: Store, check: pd.DataFrame, source: str) -> None:
    """Each validated load run keeps what the plan predicted for it (the Fleet page shows it beside the measurement),
    with the replica runs whose steps priced it."""
    for run_id, rows in check.groupby("run"):
        records = json.loads(rows.drop(columns=["run"]).to_json(orient="records"))  # plain JSON types, no numpy
        kept = [row | {"source": source} for row in records]
        store.merge_config(int(run_id), {"fleet_plan": kept})
