"""`python -m engine import PATH...`: each file read within bounds, its format detected (or named), every level it
holds parsed and checked before anything is stored, then stored at once (engine's one transaction, db.Store.add_runs):
a file Phoenix cannot read is one line naming what is wrong, and nothing half-imported stays.

An imported level is a load run like `engines load`'s: its requests are rows, its figures are computed by Phoenix's
one definition of each (engine.engines.arrivals.figures: `vllm bench serve`'s), the tool's own aggregates are kept
beside them, and where the two disagree beyond the tool's rounding the run says so. Its hardware labels it in the
place of a CPU, so the Sweeps page never ranks it against a sweep measured elsewhere."""

from __future__ import annotations

import math
import uuid
from dataclasses import asdict
from pathlib import Path

from db.entities import RequestRecord, WatchInterval
from db.store import Store
from engine.engines.arrivals import figures
from engine.errors import PhoenixError
from engine.imports import aiperf, guidellm, lm_eval, prometheus, sglang_bench, vllm_bench
from engine.imports.config import ImportConfig
from engine.imports.files import read, read_text
from engine.imports.level import Level, Request
from engine.measure import sha256_text, usd_per_1k_tokens

FORMATS = {"vllm-bench": vllm_bench, "sglang-bench": sglang_bench, "guidellm": guidellm, "aiperf": aiperf}  # JSON
TEXT_FORMATS = {"prometheus": prometheus}  # the text ones (ImportConfig.format's help lists both)
QUALITY = {"lm-eval": lm_eval}  # scores, not load: a quality run each
AGREE = 1e-3  # the tool's figure and Phoenix's agree within this share (the tool stores full floats: only
# its percentile and count rules could differ)


def check(cfg: ImportConfig) -> ImportConfig:
    if cfg.format != "auto" and cfg.format not in {**FORMATS, **TEXT_FORMATS, **QUALITY}:
        names = ", ".join([*FORMATS, *TEXT_FORMATS, *QUALITY])
        raise PhoenixError(f"--format must be auto or one of {names}, got {cfg.format!r}", field="format")
    if not (0 <= cfg.price_per_hour < 1e6):
        raise PhoenixError(
            f"--price-per-hour must be USD an hour, 0 or more, got {cfg.price_per_hour!r}", "price_per_hour"
        )
    for name in ("engine", "model", "variant", "hardware", "name"):
        value = getattr(cfg, name)
        if len(value) > 200 or any(ord(ch) < 32 for ch in value):
            raise PhoenixError(f"--{name}: at most 200 printable characters", field=name)
    return cfg


def detect(docs: list[dict], path: Path) -> str:
    for name, module in FORMATS.items():
        if all(module.matches(d) for d in docs):
            return name
    if all(isinstance(d.get("metrics"), dict) and isinstance(d.get("metadata"), dict) for d in docs):
        raise PhoenixError(f"{path}: AIPerf's per-request records: import its profile_export_aiperf.json (read beside)")
    raise PhoenixError(f"{path}: no format Phoenix imports matches it ({', '.join(FORMATS)}); pass --format")


def levels_of(paths: list[Path], cfg: ImportConfig) -> list[tuple[Path, str, Level]]:
    """Every level of every file, parsed and checked: the first file that fails stops the import before any write."""
    out = []
    for path in paths:
        docs, digest = read(path)
        fmt = detect(docs, path) if cfg.format == "auto" else cfg.format
        out += [(path, digest, level) for level in FORMATS[fmt].parse(docs, str(path))]
    return out


def scrapes_of(paths: list[Path], cfg: ImportConfig) -> tuple[list[tuple[Path, str, prometheus.Scrape]], list[Path]]:
    """The files that are Prometheus scrapes (named so, or detected), each parsed and checked; and the rest."""
    scrapes, rest = [], []
    for path in paths:
        if cfg.format not in ("auto", *TEXT_FORMATS):
            rest.append(path)
            continue
        text, digest = read_text(path)
        if cfg.format in TEXT_FORMATS or prometheus.matches(text):
            scrapes.append((path, digest, prometheus.parse(text, str(path))))
        else:
            rest.append(path)
    return scrapes, rest


def scores_of(paths: list[Path], cfg: ImportConfig) -> tuple[list[tuple[Path, str, lm_eval.Results]], list[Path]]:
    """The files that are lm-eval results (named so, or detected), each parsed with its samples; and the rest."""
    found, rest = [], []
    for path in paths:
        if cfg.format not in ("auto", *QUALITY):
            rest.append(path)
            continue
        docs, digest = read(path)
        if cfg.format in QUALITY or (len(docs) == 1 and lm_eval.matches(docs[0])):
            if len(docs) != 1:
                raise PhoenixError(f"{path}: lm-eval results are one JSON object")
            found.append((path, digest, lm_eval.parse(docs[0], path)))
        else:
            rest.append(path)
    return found, rest


def prepare(cfg: ImportConfig, paths: list[Path]) -> tuple[list[tuple], list[list[WatchInterval]]]:
    """Every run the files hold, parsed and checked, with each run's watch intervals: nothing is stored yet (the
    dashboard shows what it found before the user confirms)."""
    check(cfg)
    scrapes, paths = scrapes_of(paths, cfg)
    scored, paths = scores_of(paths, cfg)
    found = levels_of(paths, cfg)
    sweeps = {path: uuid.uuid4().hex for path, _, _ in found}  # a file's levels are one sweep
    runs = [_run(cfg, path, digest, level, sweeps[path]) for path, digest, level in found]
    scraped = [_scrape_run(cfg, path, digest, scrape) for path, digest, scrape in scrapes]
    quality = [_quality_run(cfg, path, digest, results) for path, digest, results in scored]
    intervals: list[list[WatchInterval]] = [[] for _ in runs] + [[iv] for _, iv in scraped] + [[] for _ in quality]
    return runs + [run for run, _ in scraped] + quality, intervals


def describe(run: tuple) -> str:
    """One line of what a prepared run holds: its figures, its acceptance or its scores, and any warning."""
    name, config, *_rest, records = run
    if "quality" in config:
        said = ", ".join(f"{t} {m} {v:.3f}" for t, ms in config["quality"]["scores"].items() for m, v in ms.items())
    elif "serve_watch" in config:
        said = f"acceptance {config['imported']['acceptance']:.3f} over {config['imported']['drafts']:,} drafts"
    else:
        f = next(iter(config["figures"].values()))
        said = f"{f['output_throughput']:.1f} tok/s" if f.get("output_throughput") is not None else "no figures"
    rows = f" ({len(records)} rows)" if records else ""
    return f"{name}: {said}{rows}" + "".join(f"\n  warning: {w}" for w in config["imported"]["warnings"])


def import_files(store: Store, cfg: ImportConfig, paths: list[Path], say=print) -> list[int]:
    runs, intervals = prepare(cfg, paths)
    ids = store.add_runs(runs, intervals)
    for run_id, run in zip(ids, runs):
        say(f"run {run_id}: {describe(run)}")
    return ids


def _run(cfg: ImportConfig, path: Path, digest: str, level: Level, sweep: str) -> tuple:
    engine = cfg.engine or level.engine
    model = cfg.model or level.model
    concurrency_level = math.isinf(level.rate) and level.concurrency is not None
    label = f"c={level.concurrency}" if concurrency_level else f"rate={level.rate:g}"
    name = f"{cfg.name or f'{level.tool}: {path.name}'} {label}"
    mode = f"{engine}-{cfg.variant}_c{level.concurrency or len(level.requests) or 1}"
    records = [_record(i, mode, r) for i, r in enumerate(level.requests)]
    ours = figures(records, level.duration_s, {}) if records else _from_aggregates(level)
    warnings = _disagreements(ours, level) if records else ["the file holds no per-request data (no --save-detailed)"]
    config = {
        "load": {
            "engine": engine,
            "prompts": level.dataset,
            "limit": len(records) or ours.get("answered"),
            "max_new_tokens": None,
            "chat": True,
        },
        "level": level.concurrency,
        "request_rate": None if concurrency_level else ("inf" if math.isinf(level.rate) else level.rate),
        "variants": [cfg.variant],
        "figures": {cfg.variant: ours},
        "wall_s": {cfg.variant: level.duration_s},
        "cache_scenario": "not controlled (imported: the tool does not say)",
        "hardware": cfg.hardware or "not recorded (imported)",
        "environment": {"cpu": cfg.hardware or "not recorded (imported)"},
        "sweep": {"id": sweep},
        "price": _price(cfg, ours),
        "imported": {
            "tool": level.tool,
            "version": level.version or "not in the file",
            "file": path.name,
            "sha256": digest,
            "command": level.command or "not in the file",
            "aggregates": level.aggregates,
            "speculative": level.speculative,
            "warnings": warnings,
            "unknown_fields": level.extra,
            "settings": asdict(cfg),
        },
    }
    return name, config, model, None, records


def _price(cfg: ImportConfig, figures: dict) -> dict | None:
    """What a level's output cost on the hardware at the price given (engine.measure.usd_per_1k_tokens)."""
    per_1k = usd_per_1k_tokens(cfg.price_per_hour, figures.get("output_throughput"))
    return None if per_1k is None else {"usd_per_hour": cfg.price_per_hour, "usd_per_1k_tokens": per_1k}


def _scrape_run(cfg: ImportConfig, path: Path, digest: str, scrape: prometheus.Scrape) -> tuple[tuple, WatchInterval]:
    """A scrape as a watch run (the Run page's watch view) with its one interval."""
    c = scrape.counters
    engine, model = cfg.engine or c.engine, cfg.model or scrape.model or "unknown"
    summary = c.summary()
    config = {
        "serve_watch": {"imported": prometheus.TOOL, "file": path.name},
        "engine": {"engine": engine},
        "hardware": cfg.hardware or "not recorded (imported)",
        "environment": {"cpu": cfg.hardware or "not recorded (imported)"},
        "imported": {
            "tool": prometheus.TOOL,
            "version": "not in the file",
            "file": path.name,
            "sha256": digest,
            "command": "not in the file",
            "drafts": int(c.drafts),
            "acceptance": summary["acceptance"],
            "per_position": summary["per_position"],  # accepted at position i over drafts: vLLM's, unconditional
            "span": "since the server started (a scrape's counters are cumulative)",
            "warnings": [],
            "settings": asdict(cfg),
        },
    }
    name = cfg.name or f"{prometheus.TOOL}: {path.name}"
    return (name, config, model, None, []), prometheus.interval(c)


def _quality_run(cfg: ImportConfig, path: Path, digest: str, found: lm_eval.Results) -> tuple:
    """lm-eval's scores as a quality run: each sample a row holding its answer (no timings: not a load run)."""
    drafters = {str((s.get("speculation") or {}).get("drafter", "as served")) for s in found.settings.values()}
    config: dict = {
        "quality": {
            "scores": found.scores,
            "per_sample": {f"{s.task}/{s.name}": s.scores for s in found.samples},
            "drafter": ", ".join(sorted(drafters)),
            "settings": found.settings,
        },
        "engine": {"engine": cfg.engine or "unknown", "variant": cfg.variant},
        "hardware": cfg.hardware or "not recorded (imported)",
        "environment": {"cpu": cfg.hardware or "not recorded (imported)"},
        "imported": {
            "tool": lm_eval.TOOL,
            "version": found.version or "not in the file",
            "file": path.name,
            "sha256": digest,
            "command": "not in the file (its config holds the model and its arguments)",
            "warnings": [] if found.samples else ["the results hold no samples (run the harness with --log_samples)"],
            "unknown_fields": found.extra,
            "settings": asdict(cfg),
        },
    }
    records = [
        RequestRecord(
            run_id=0,
            seq=i,
            mode=f"lm-eval-{config['quality']['drafter']}",
            prompt_id=f"{s.task}/{s.name}",
            tokens_per_s=0.0,
            output_text=s.answer[:100_000],
            output_sha256=sha256_text(s.answer),
        )
        for i, s in enumerate(found.samples)
    ]
    name = cfg.name or f"{lm_eval.TOOL}: {', '.join(found.scores)} (drafter {config['quality']['drafter']})"
    return name, config, cfg.model or found.model, None, records


def _record(i: int, mode: str, r: Request) -> RequestRecord:
    ok = r.error is None
    return RequestRecord(
        run_id=0,
        seq=i,
        mode=mode,
        k=0,
        prompt_id=f"request-{i}",
        prompt_tokens=r.prompt_tokens,
        output_tokens=r.output_tokens if ok else 0,
        latency_s=r.latency_s,
        ttft_s=r.ttft_s,
        tokens_per_s=r.output_tokens / r.latency_s if ok and r.latency_s > 0 else 0.0,
        output_text=r.text,
        output_sha256=sha256_text(r.text),
        error=r.error,
        queue_s=r.queue_s,
        cached_tokens=r.cached_tokens,
    )


def _disagreements(ours: dict, level: Level) -> list[str]:
    out = []
    for theirs, mine in level.compared.items():
        a, b = level.aggregates.get(theirs), ours.get(mine)
        if a is None or b is None:
            continue
        if abs(a - b) > AGREE * max(abs(a), abs(b), 1e-9):
            out.append(f"{theirs}: the tool says {a:.6g}, Phoenix computes {b:.6g} from the same requests")
    return out


def _from_aggregates(level: Level) -> dict:
    """The figures of a level with no per-request data: the tool's own, under Phoenix's names."""
    a = level.aggregates
    out: dict = {mine: a.get(theirs) for theirs, mine in level.compared.items()}
    out["requests"] = (out.get("answered") or 0) + (out.get("failed") or 0)
    out["wall_s"] = level.duration_s
    out["goodput"] = a.get("request_goodput")
    out |= {"cached_tokens": None, "prompt_tokens": out.get("prompt_tokens"), "cached_share": None}
    out["source"] = "the tool's aggregates (no per-request data)"
    return out
