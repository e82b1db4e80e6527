"""A Phoenix run in MLflow (mlflow-skinny, optional: requirements-mlflow.txt): the config as params, per-mode figures
as metrics, per-position acceptance as step-indexed metrics, tags and the note, and the run's CSV and report.

Re-export is idempotent: the MLflow run id is stored in the Phoenix run's config, every metric carries a timestamp
fixed by the run, and a param already logged with the same value is not logged again.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from db.store import Store, safe_url
from engine.analysis.breakeven import rates
from engine.analysis.fit import reached_of
from engine.bench import report
from engine.errors import PhoenixError
from engine.export.files import export
from engine.paths import DATA_DIR

INSTALL = ".venv/bin/pip install -r requirements-mlflow.txt"
PARAM_MAX = 6000  # MLflow's limit on a param value


@dataclass
class MlflowTarget:
    tracking_uri: str = f"sqlite:///{DATA_DIR / 'mlflow.db'}"  # where MLflow keeps runs (a server URL works too)
    experiment: str = "phoenix"  # the MLflow experiment the run goes into


def _client(uri: str):
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise PhoenixError(f"MLflow export needs mlflow-skinny: run `{INSTALL}`") from None
    # A refused or unreachable server: a few tries with a short timeout, not MLflow's defaults (about four
    # minutes of retries against a closed port); a user's own settings win.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
    try:
        return MlflowClient(tracking_uri=uri)
    except Exception as exc:  # an unknown scheme, a malformed URI
        raise PhoenixError(f"--tracking-uri {safe_url(uri)}: {_line(exc)}") from None


def _line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def key(text: str) -> str:
    """An MLflow metric or param name: letters, digits and _ - . / and space; anything else becomes _."""
    return re.sub(r"[^\w\-./ ]", "_", text)[:250]


def tag_key(tag: str) -> str:
    """A Phoenix tag's MLflow key, one per tag: where ``key`` had to change the name, a short hash of the tag keeps
    tags apart that it would merge (x:y, x;y and x@y were all phoenix.tag.x_y)."""
    name = key(f"phoenix.tag.{tag}")
    if name == f"phoenix.tag.{tag}":
        return name
    return f"{name[:240]}.{hashlib.sha1(tag.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def canonical(uri: str) -> str:
    """One spelling per store: a SQLite tracking store by its resolved path (.../m.db and ..././m.db were two
    stores to the run's record, and so two MLflow runs for one Phoenix run); a server URL without a trailing /."""
    if uri.startswith("sqlite:///"):
        return "sqlite:///" + str(Path(uri.removeprefix("sqlite:///")).resolve())
    return uri.rstrip("/")


def _flat(value, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: str(value)[:PARAM_MAX]}


def _experiment(client, target: MlflowTarget) -> str:
    found = client.get_experiment_by_name(target.experiment)
    if found is not None:
        return found.experiment_id
    location = None
    if target.tracking_uri.startswith("sqlite:///"):  # artifacts beside the tracking database, not in ./mlruns
        location = (Path(target.tracking_uri.removeprefix("sqlite:///")).resolve().parent / "mlartifacts").as_uri()
    return client.create_experiment(target.experiment, artifact_location=location)


def metrics_of(store: Store, run_id: int) -> list[tuple[str, float, int]]:
    """(name, value, step): per mode its figures (step 0), per arm its unconditional acceptance per position."""
    out: list[tuple[str, float, int]] = []
    for m in report.summaries(store, run_id):
        figures = {
            "n": m.n,
            "tokens_per_s": m.tokens_per_s,
            "p50_latency_s": m.p50_latency_s,
            "p95_latency_s": m.p95_latency_s,
            "acceptance": m.acceptance,
            "mean_acceptance_length": m.mean_acceptance_length,
            "tokens_per_pass": m.tokens_per_pass,
            "identical": m.identical_n,
            "checked": m.checked_n,
        }
        if m.speedup is not None and m.speedup.median is not None:
            figures.update(
                speedup=m.speedup.median,
                speedup_p25=m.speedup.p25,
                speedup_p75=m.speedup.p75,
                speedup_ci_low=m.speedup.low,
                speedup_ci_high=m.speedup.high,
            )
        out += [(key(f"{m.mode}/{name}"), float(v), 0) for name, v in figures.items() if v is not None]
    pos = store.positions(run_id)
    for (mode, k), g in pos.groupby(["mode", "k"], sort=True) if not pos.empty else []:
        g = g.sort_values("position")
        uncond, _ = rates(g["proposed"].astype(int).tolist(), g["accepted"].astype(int).tolist(), reached_of(g))
        out += [
            (key(f"{mode}/k{int(k)}/acceptance_per_position"), float(u), i + 1) for i, u in enumerate(uncond) if u == u
        ]
    return out


def export_run(store: Store, run_id: int, target: MlflowTarget) -> dict:
    """Log the run into MLflow; a second export of the same run to the same store updates the same MLflow run.
    Any failure on MLflow's side is one line, and an MLflow run this export created is ended FAILED, never left
    RUNNING."""
    info = store.get_run(run_id)
    if info is None:
        raise PhoenixError(f"run {run_id} does not exist")
    target = replace(target, tracking_uri=canonical(target.tracking_uri))
    client = _client(target.tracking_uri)
    created: list[str] = []
    try:
        return _export(store, info, target, client, created)
    except PhoenixError:
        raise
    except Exception as exc:
        for mid in created:
            try:
                client.set_terminated(mid, "FAILED")
            except Exception:
                pass  # the server that failed the export may refuse this too; the line below says why
            # the next try continues this MLflow run instead of creating another (two tries once left two)
            mlflow = {"tracking_uri": safe_url(target.tracking_uri), "run_id": mid, "experiment": target.experiment}
            store.merge_config(run_id, {"mlflow": mlflow})
        raise PhoenixError(f"MLflow at {safe_url(target.tracking_uri)}: {_line(exc)}") from None


def _export(store: Store, info, target: MlflowTarget, client, created: list[str]) -> dict:
    run_id = info.id
    from mlflow.entities import Metric, Param, RunTag  # importable once _client found mlflow

    previous = info.config.get("mlflow") or {}
    mlflow_run = None
    stored_uri = safe_url(target.tracking_uri)
    if previous.get("tracking_uri") == stored_uri and previous.get("run_id"):
        try:
            mlflow_run = client.get_run(previous["run_id"])
        except Exception:  # gone on the MLflow side: log a new one
            mlflow_run = None
        if mlflow_run is not None and mlflow_run.info.lifecycle_stage == "deleted":  # in MLflow's bin: a new one
            mlflow_run = None
    if mlflow_run is None:
        mlflow_run = client.create_run(
            _experiment(client, target),
            run_name=f"phoenix #{info.id} {info.name}"[:250],
            start_time=int(info.created_at.timestamp() * 1000),
        )
        created.append(mlflow_run.info.run_id)
    mid = mlflow_run.info.run_id
    logged = mlflow_run.data.params
    params = {key(k): v for k, v in _flat({k: v for k, v in info.config.items() if k != "mlflow"}).items()}
    params.update({"target": info.target, "draft": info.draft or "none"})
    new = [Param(k, v) for k, v in params.items() if k not in logged]
    stamp = int((info.finished_at or info.created_at).timestamp() * 1000)  # fixed: a re-export logs the same points
    metrics = [Metric(name, value, stamp, step) for name, value, step in metrics_of(store, run_id)]
    sha = str(info.config.get("environment", {}).get("git_sha") or "")
    tags = [RunTag("phoenix.run_id", str(info.id)), RunTag("phoenix.status", info.status)]
    tags += [
        RunTag(name, value)
        for name, value in (
            ("phoenix.tags", ",".join(info.tags)),
            ("mlflow.note.content", info.note or ""),
            ("mlflow.source.git.commit", sha),
        )
        if value
    ]
    tags += [RunTag(tag_key(t), "true") for t in info.tags]
    for i in range(0, max(len(new), 1), 100):  # MLflow takes at most 100 params and 1000 metrics a batch
        client.log_batch(mid, params=new[i : i + 100], tags=tags if i == 0 else [])
    for i in range(0, len(metrics), 1000):
        client.log_batch(mid, metrics=metrics[i : i + 1000])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / f"run{run_id}-requests.csv").write_text(export(store, run_id, "csv"), encoding="utf-8")
        (Path(tmp) / f"run{run_id}-report.md").write_text(report.report(store, run_id), encoding="utf-8")
        client.log_artifacts(mid, tmp)
    client.set_terminated(
        mid,
        "FINISHED" if info.status == "done" else "KILLED",
        end_time=int((info.finished_at or info.created_at).timestamp() * 1000),
    )
    store.merge_config(run_id, {"mlflow": {"tracking_uri": stored_uri, "run_id": mid, "experiment": target.experiment}})
    return {"run_id": mid, "params": len(new), "metrics": len(metrics), "updated": bool(previous.get("run_id") == mid)}
