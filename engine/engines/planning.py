"""`fleet plan`: the replica count and speculation setting that meet an SLO at a request rate, predicted from one
replica's measured steps (engine.analysis.fleet_plan), with the plan's error against fleets measured here beside it.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pandas as pd

from db.store import Store
from engine.analysis import fleet_plan as fp
from engine.decode.config import BUDGET, LONG_PREFILL
from engine.decode.prefix import BLOCK
from engine.engines.arrivals import arrival_times, rates_of, slos_of
from engine.engines.config import PlanConfig
from engine.engines.replicas import threads_each
from engine.engines.workload import tenant_of, with_system
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


def _serve_of(store: Store, run_ids: list[int]) -> dict:
    info = store.get_run(run_ids[0])
    return dict(((info.config or {}).get("phoenix_serve") or {}) if info else {})


def _folder(target: str):
    from engine.decode.loading import resolve  # lazy: the model's files are read only where a cache is priced

    try:
        return resolve(target, "target")
    except PhoenixError as exc:
        raise PhoenixError(f"the plan prices the prefix cache from the target's own files: {exc}") from None


def chunks(store: Store, run_ids: list[int]) -> dict[str, int]:
    """The source replica's step budget and prompt chunk (its `serve` settings; Phoenix's defaults where a run from
    before them kept none): a replica prefills a long prompt over several steps, and a request admitted meanwhile
    finds nothing of it in the cache."""
    serve = _serve_of(store, run_ids)
    return {
        "budget": int(serve.get("max_num_batched_tokens") or BUDGET),
        "long_prefill": int(serve.get("long_prefill_token_threshold") or LONG_PREFILL),
    }


def cache_tokens(store: Store, run_ids: list[int]) -> int:
    """The source replica's prefix-cache budget in tokens: its --prefix-cache-gb over the KV bytes a token takes in
    its target (2 x layers x KV heads x head size x the served dtype's bytes; a head's taps, kept beside the KV
    where one drafts, are not priced). 0 where it ran without a cache."""
    serve = _serve_of(store, run_ids)
    gb = float(serve.get("prefix_cache_gb") or 0.0)
    if gb <= 0 or not serve.get("target"):
        return 0
    with open(_folder(serve["target"]) / "config.json") as f:
        cfg = json.load(f)
    cfg = cfg.get("text_config") or cfg
    heads = int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    info = store.get_run(run_ids[0])
    dtype = str((((info.config if info else {}) or {}).get("models") or {}).get("target", {}).get("dtype") or "")
    per_token = 2 * int(cfg["num_hidden_layers"]) * int(cfg.get("num_key_value_heads") or heads) * head_dim
    return int(gb * 2**30) // (per_token * (2 if dtype in ("bfloat16", "float16") else 4))


def shared_prefix(target: str, load: dict) -> dict[int, int]:
    """Per tenant, the prompt tokens its system prompt puts before every prompt as the target tokenizes it: the
    common prefix of two prompts sent with it (the chat template's tokens counted). {} with no system prompt."""
    if not load.get("system_prompt"):
        return {}
    from transformers import AutoTokenizer  # lazy: only a sitting with a system prompt needs the tokenizer

    from engine.decode.decoder import template_ids  # lazy: torch, for a plan that prices a system prompt

    tok = AutoTokenizer.from_pretrained(_folder(target))
    sweep = SimpleNamespace(system_prompt=load["system_prompt"], tenants=int(load.get("tenants") or 1))
    sweep.chat = bool(load.get("chat", True))

    def ids(text: str, tenant: int) -> list[int]:  # as the server tokenizes a request (engine.serve.parse)
        sent, extra = with_system(sweep, text, None, tenant)
        if sweep.chat:
            return template_ids(tok, (extra or {})["messages"])
        return list(tok(sent, add_special_tokens=False)["input_ids"])

    out = {}
    for tenant in range(max(1, sweep.tenants)):
        a, b = ids("Xylophone", tenant), ids("7 quartz", tenant)
        out[tenant] = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return out


def prefill_points(requests) -> list[tuple[int, float]]:
    """(computed prompt tokens, prefill seconds) of each answered, timed request: a prefill computes the tokens its
    prefix cache did not serve, so the fit is on those, as the plan charges them (on every prompt token, a source
    whose cache served a shared system prompt was fitted at a fraction of the true cost a token)."""
    timed = [r for r in requests if not r.error and r.prefill_s]
    return [(r.prompt_tokens - int(r.cached_tokens or 0), float(r.prefill_s)) for r in timed]


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
    prefills = prefill_points([r for i in run_ids for r in store.requests(i)])
    profile = fp.fit_profile(steps, prefills, threads or (os.cpu_count() or 1))
    return profile, workload(store, run_ids)


def threads_of(store: Store, run_id: int) -> int:
    info = store.get_run(run_id)
    if info is None:
        raise PhoenixError(f"--source: no run #{run_id}")
    return int(((info.config or {}).get("environment") or {}).get("threads") or 0) or (os.cpu_count() or 1)


def load_profiles(store: Store, run_ids: list[int]) -> dict[int, fp.Profile]:
    """One step-cost fit per thread count the sources were measured with: a replica is priced from the source that
    ran with its own thread count where there is one (a 1-thread replica does not cost twice a 2-thread one: the
    step's memory-bound share does not halve), else scaled from the source with the most threads."""
    by_threads: dict[int, list[int]] = {}
    for run_id in run_ids:
        by_threads.setdefault(threads_of(store, run_id), []).append(run_id)
    return {t: load_profile(store, ids)[0] for t, ids in sorted(by_threads.items())}


def profile_for(profiles: dict[int, fp.Profile], threads: int) -> fp.Profile:
    return profiles.get(threads) or profiles[max(profiles)]


def workload(store: Store, run_ids: list[int], target: str = "", mode: str = "") -> fp.Workload:
    """What the runs sent: each answered request's prompt and output tokens; for a load run whose cache scenario
    lets requests share (not cold), each one's tenant and the system-prompt tokens it shares (as ``target``
    tokenizes them). With ``mode`` (one variant's pass of a load level), that pass in the order sent, each request
    at the time the sweep sent it (engine.engines.arrivals: the level's own schedule, reproduced from its seed)."""
    rows = [r for i in run_ids for r in store.requests(i) if not r.error and r.output_tokens > 0]
    rows = sorted((r for r in rows if r.mode == mode), key=lambda r: r.seq) if mode else rows
    if not rows:
        raise PhoenixError("no answered request to draw the workload from")
    work = fp.Workload([r.prompt_tokens for r in rows], [r.output_tokens for r in rows])
    info = store.get_run(run_ids[0])
    load = dict(((info.config or {}).get("load") or {}) if info else {})
    rate = float((info.config or {}).get("request_rate") or "inf") if info else float("inf")
    if mode and rate != float("inf"):  # one block a level at a rate: the schedule is the level's from its start
        times = arrival_times(len(rows), rate, float(load.get("burstiness") or 1.0), int(load.get("seed") or 0))
        work.arrive = times
    if target and load.get("cache", "warm") != "cold":  # a load run before the cold protocol sent as it came
        shared = shared_prefix(target, load)
        sweep = SimpleNamespace(tenants=int(load.get("tenants") or 1))
        work.tenant = [tenant_of(sweep, r.prompt_id) for r in rows]
        work.shared_tokens = [shared.get(t, 0) for t in work.tenant]
    return work


MAX_REPLICAS = 16  # fleet start's bound
MAX_BATCH = 256  # serve's bound on --max-batch
MAX_REQUESTS = 10_000  # requests per simulated sitting: enough for a stable median, bounded in time
MAX_RATE = 1e4  # requests/s a plan prices (a finite rate past this is no load this machine serves)


def check_plan(cfg: PlanConfig) -> None:
    """Every setting of a plan checked before any work, each refusal one line with the bounds `fleet start` and
    `serve` use (a 0 once crashed the simulation; 100,000 replicas simulated without end)."""
    if not 1 <= cfg.requests <= MAX_REQUESTS:
        raise PhoenixError(f"--requests must be in 1..{MAX_REQUESTS}, got {cfg.requests}", field="requests")
    if not 0 <= cfg.shared_prefix <= 1 << 20:
        raise PhoenixError(f"--shared-prefix must be in 0..{1 << 20} tokens, got {cfg.shared_prefix}", "shared_prefix")
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
    sources = _ints(cfg.source, "--source")
    profiles, work = load_profiles(store, sources), workload(store, sources)
    if cfg.shared_prefix:
        work.shared_tokens = [cfg.shared_prefix] * len(work.prompt_tokens)
    cache = cache_tokens(store, sources) if cfg.shared_prefix else 0
    chunked = chunks(store, sources)
    slo = slos_of(cfg.slo) if cfg.slo else {}
    preds = []
    for n in _ints(cfg.replicas, "--replicas"):
        each = threads_each(n) if cfg.same_machine else max(profiles)
        profile = profile_for(profiles, each)
        for rate in _rates(cfg.rate):
            for setting in sorted(profile.per_pass):
                preds.append(fp.predict(profile, setting, n, rate, work, cfg.requests, max_batch=cfg.max_batch,
                                        threads_each=each, cache_tokens=cache, block=BLOCK, **chunked))  # fmt: skip
    table = pd.DataFrame([vars(p) for p in preds])
    if slo:
        table["meets SLO"] = [fp.meets(p, slo) for p in preds]
    return table, (fp.cheapest(preds, slo) if slo else None)


def in_sample(source, load) -> bool:
    """Whether a source replica served the load run it would be validated on: its router is the run's address and
    it was up while the run ran (a plan judged on its own measurements proves nothing)."""
    router = str(((source.config or {}).get("phoenix_serve") or {}).get("router") or "")
    url = str(((load.config or {}).get("load") or {}).get("url") or "").rstrip("/").removesuffix("/v1")
    ended = source.finished_at or load.created_at
    return bool(router and url and router.endswith("@" + url)) and source.created_at <= load.created_at <= ended


def validation(store: Store, cfg: PlanConfig) -> pd.DataFrame:
    """Each measured fleet level beside the plan's prediction for it and the naive guess (fleet_plan.naive):
    throughput and p50 TTFT, their errors, the cached share, and whether the source is out of sample."""
    sources = _ints(cfg.source, "--source")
    profiles = load_profiles(store, sources)
    cache, target = cache_tokens(store, sources), str(_serve_of(store, sources).get("target") or "")
    chunked = chunks(store, sources)
    out = []
    for item in (x for x in cfg.validate.split(",") if x.strip()):
        run_text, _, n_text = item.partition(":")
        run_id, replicas = _ints(run_text, "--validate")[0], _ints(n_text or "1", "--validate")[0]
        info = store.get_run(run_id)
        if info is None:
            raise PhoenixError(f"--validate: no run #{run_id}")
        rate = float(info.config.get("request_rate") or "inf")
        profile = profile_for(profiles, threads_each(replicas))
        drafting = [s for s in profile.per_pass if s != "none"]
        outside = not any(in_sample(store.get_run(i), info) for i in sources)
        for variant, fig in (info.config.get("figures") or {}).items():
            if variant != "none" and len(drafting) != 1:
                continue  # which measured setting a drafting variant ran is unambiguous only where the replica ran one
            setting = "none" if variant == "none" else drafting[0]
            engine = str((info.config.get("load") or {}).get("engine") or "phoenix")
            level = int(fig.get("requests") or 0)
            work = _pass(store, run_id, target, f"{engine}-{variant}_c", level)
            guess_tokens, guess_ttft = fp.naive(profile, rate, work)
            n = int(fig.get("answered") or len(work.output_tokens))
            pred = fp.predict(profile, setting, replicas, rate, work, n, max_batch=cfg.max_batch,
                              threads_each=threads_each(replicas), cache_tokens=cache, block=BLOCK,
                              **chunked)  # fmt: skip
            tokens, ttft = fig["output_throughput"], fig["ttft_ms_p50"]
            out.append({
                "run": run_id, "replicas": replicas, "rate": rate, "variant": variant, "out of sample": outside,
                "req/s measured": fig.get("request_throughput"),
                "tok/s measured": tokens, "tok/s predicted": pred.output_throughput,
                "tok/s error": fp.error(pred.output_throughput, tokens),
                "tok/s naive": guess_tokens, "tok/s naive error": fp.error(guess_tokens, tokens),
                "TTFT p50 measured (ms)": ttft, "TTFT p50 predicted (ms)": pred.ttft_ms_p50,
                "TTFT error": fp.error(pred.ttft_ms_p50, ttft),
                "TTFT naive (ms)": guess_ttft, "TTFT naive error": fp.error(guess_ttft, ttft),
                "cached share predicted": pred.cached_share, "cached share measured": fig.get("cached_share"),
            })  # fmt: skip
    return pd.DataFrame(out)


def _pass(store: Store, run_id: int, target: str, prefix: str, level: int) -> fp.Workload:
    """One variant's pass of a load level (its mode is ENGINE-VARIANT_c<cap>), replayed as sent."""
    modes = {r.mode for r in store.requests(run_id) if r.mode.startswith(prefix)}
    if len(modes) != 1:
        return workload(store, [run_id], target)  # the pass cannot be told apart: drawn from the level's requests
    return workload(store, [run_id], target, mode=modes.pop())


def record_validation(store: Store, check: pd.DataFrame, source: str) -> None:
    """Each validated load run keeps what the plan predicted for it (the Fleet page shows it beside the measurement),
    with the replica runs whose steps priced it; a plan from other sources is kept beside it (each source's rows
    replaced only by a validation from the same sources)."""
    for run_id, rows in check.groupby("run"):
        records = json.loads(rows.drop(columns=["run"]).to_json(orient="records"))  # plain JSON types, no numpy
        info = store.get_run(int(run_id))
        before = ((info.config or {}).get("fleet_plan") or []) if info is not None else []
        kept = [r for r in before if r.get("source") != source] + [row | {"source": source} for row in records]
        store.merge_config(int(run_id), {"fleet_plan": kept})
