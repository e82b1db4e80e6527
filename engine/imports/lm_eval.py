"""lm-evaluation-harness results (`lm_eval run ... --output_path D [--log_samples]`): ``results_<date>.json`` holds
each task's scores (``pass_at_1,none`` and its ``_stderr``), the model and its arguments, the generation settings and
the harness's version; with --log_samples a ``samples_<task>_<date>.jsonl`` beside it holds each document's answer
and its score, which the import reads as the run's rows (the answer's text, so two settings' outputs can be compared
exactly). A quality run is not a load run: it carries no timings and never draws on the serving pages."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import PhoenixError
from engine.imports.files import read_text
from engine.imports.values import number, text

TOOL = "lm-eval"


@dataclass
class Sample:
    task: str
    doc_id: int
    name: str  # the document's own id where it has one (HumanEval/0), else the harness's doc_id
    answer: str
    scores: dict[str, float]


@dataclass
class Results:
    version: str | None
    model: str
    model_args: dict
    scores: dict[str, dict[str, float]]  # task -> metric -> value (and metric_stderr)
    settings: dict  # task -> its generation arguments (the drafter asked for rides here)
    samples: list[Sample] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


def matches(doc: dict) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("results"), dict) and "lm_eval_version" in doc


def parse(doc: dict, path: Path) -> Results:
    where = str(path)
    if not matches(doc):
        raise PhoenixError(f"{where}: not lm-eval results (it needs results and lm_eval_version)")
    scores = {str(task): _scores(found, f"{where}: results.{task}") for task, found in doc["results"].items()}
    if not scores:
        raise PhoenixError(f"{where}: the results hold no task")
    config: dict = doc["config"] if isinstance(doc.get("config"), dict) else {}
    configs: dict = doc["configs"] if isinstance(doc.get("configs"), dict) else {}
    args = config.get("model_args")
    args = args if isinstance(args, dict) else {}
    return Results(
        version=text(doc.get("lm_eval_version")),
        model=str(doc.get("model_name") or args.get("model") or "unknown"),
        model_args=args,
        scores=scores,
        settings={t: (configs.get(t) or {}).get("generation_kwargs") or {} for t in scores},
        samples=[s for task in scores for s in _samples(path, task)],
        extra={k: doc.get(k) for k in ("config", "n-samples", "versions", "n-shot", "task_hashes", "date")},
    )


def _scores(found, where: str) -> dict[str, float]:
    """A task's metrics by their name less the filter (``pass_at_1,none`` -> ``pass_at_1``)."""
    if not isinstance(found, dict):
        raise PhoenixError(f"{where} is not a table of metrics")
    out = {}
    for key, value in found.items():
        if "," not in key or value in ("N/A", None):
            continue
        out[key.split(",")[0]] = number(value, key, where)
    return out


def _samples(results: Path, task: str) -> list[Sample]:
    """The task's samples file the same harness run wrote beside its results (the same timestamp), if any."""
    stamp = results.name.removeprefix("results_").removesuffix(".json")
    path = results.with_name(f"samples_{task}_{stamp}.jsonl")
    if not path.is_file():
        return []
    raw, _ = read_text(path)
    out = []
    for i, line in enumerate(raw.splitlines()):
        if not line.strip():
            continue
        try:
            s = json.loads(line)
            answer = s["filtered_resps"][0]
            doc = s.get("doc") or {}
            scores = {m: number(s[m], m, f"{path} line {i + 1}") for m in s.get("metrics") or [] if m in s}
            out.append(Sample(task, int(s["doc_id"]), str(doc.get("task_id") or s["doc_id"]), str(answer), scores))
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise PhoenixError(f"{path} line {i + 1}: not a sample the harness writes ({exc!s:.80})") from None
    return out
