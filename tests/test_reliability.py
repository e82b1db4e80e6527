"""Bad input, faults and untrusted files: one clear line, a truthful status, nothing lost."""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from helpers import assert_one_line_error, migrated, pair_flags, run_cli, start_worker, stop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db.entities import RunFilter
from db.store import Store
from engine.errors import PhoenixError
from engine.prompts.sets import parse_jsonl

ROOT = Path(__file__).resolve().parent.parent


def test_a_model_that_needs_remote_code_is_refused(capsys, tiny_dirs, tmp_path):
    import shutil

    path = tmp_path / "remote"
    shutil.copytree(tiny_dirs["qwen3"]["target"], path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "modeling_evil.py").write_text("raise SystemExit('model code ran')\n")
    code, _, err = run_cli(capsys, "generate", "--target", str(path), "--draft", "none", "--drafter", "ngram")
    assert_one_line_error(code, err, "needs trust_remote_code")


def test_pickle_only_weights_are_refused_unless_allowed(capsys, tiny_dirs, tmp_path):
    import shutil

    from safetensors.torch import load_file

    path = tmp_path / "pickled"
    shutil.copytree(tiny_dirs["qwen3"]["target"], path)
    weights = load_file(path / "model.safetensors")
    (path / "model.safetensors").unlink()
    torch.save(weights, path / "pytorch_model.bin")
    code, _, err = run_cli(capsys, "generate", "--target", str(path), "--draft", "none", "--drafter", "ngram")
    assert_one_line_error(code, err, "pickle format.*--allow-pickle")
    code, out, err = run_cli(
        capsys,
        "generate",
        "--target",
        str(path),
        "--draft",
        "none",
        "--drafter",
        "ngram",
        "--allow-pickle",
        "--device",
        "cpu",
        "--max-new-tokens",
        "4",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["output_tokens"] == 4


def test_a_prompt_longer_than_the_context_is_refused_before_any_write(capsys, tiny_dirs, tmp_path):
    prompts = tmp_path / "long.jsonl"
    prompts.write_text(json.dumps({"id": "long", "prompt": "x = 1\n" * 2000}) + "\n")
    db = tmp_path / "p.db"
    d = tiny_dirs["qwen3"]
    code, _, err = run_cli(
        capsys,
        "bench",
        "--db",
        str(db),
        *pair_flags(d, prompts, cpu=True),
        "--modes",
        "target",
    )
    assert_one_line_error(code, err, "exceed the target's context of 512")
    assert not db.exists() or not Store(f"sqlite:///{db}").list_runs()


def test_a_database_path_that_cannot_exist_is_one_line(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run_cli(capsys, "runs", "--db", str(blocker / "x.db"))
    assert_one_line_error(code, err, "cannot create the database folder")


def _limit_file_size(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes fail with EFBIG instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.subprocess
def test_a_full_disk_ends_the_run_truthfully_and_keeps_written_rows(tiny_dirs, prompt_file, tmp_path):
    db = tmp_path / "full.db"
    url = f"sqlite:///{db}"
    migrated(url)
    size = db.stat().st_size
    d = tiny_dirs["qwen3"]
    prompts = tmp_path / "many.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"def f{i}(x):\n"}) + "\n" for i in range(40)))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "bench",
            "--db",
            str(db),
            *pair_flags(d, prompts, cpu=True),
            "--limit",
            "40",
            "--max-new-tokens",
            "24",
            "--modes",
            "target,model_2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_file_size(size + 48 * 1024),
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot write") and "full" in last
    store = Store(url)
    run = store.list_runs()[0]
    kept = store.count_requests(run.id)
    store.mark_stale(0.0)
    assert store.get_run(run.id).status in ("failed", "interrupted")
    assert 0 < kept < 80
    # the next run works once there is room again
    code = one_request_bench(db, d, prompt_file).returncode
    assert code == 0
    assert store.count_requests(run.id) == kept


def one_request_bench(db, d: dict, prompt_file, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m engine bench` of one target-only request into ``db``, in its own process."""
    argv = [sys.executable, "-m", "engine", "bench", "--db", str(db), *pair_flags(d, prompt_file, cpu=True)]
    argv += ["--limit", "1", "--max-new-tokens", "4", "--modes", "target"]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.subprocess
def test_the_dashboard_reads_while_two_workers_write(tiny_dirs, prompt_file, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from engine.bench.config import BenchConfig
    from engine.bench.setup import create_run

    url = f"sqlite:///{tmp_path / 'busy.db'}"
    migrated(url)
    store = Store(url)
    d = tiny_dirs["qwen3"]
    for _ in range(2):
        create_run(
            store,
            BenchConfig(
                target=d["target"],
                draft=d["near"],
                prompts=prompt_file,
                limit=4,
                max_new_tokens=16,
                modes=["target", "model_2"],
                device="cpu",
            ),
            status="queued",
        )
    monkeypatch.setenv("PHOENIX_DB", url)
    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "0")
    procs = [start_worker(url, "--once") for _ in range(2)]
    renders = 0
    try:
        while any(p.poll() is None for p in procs) and renders < 200:
            at = AppTest.from_file("../app/main.py", default_timeout=60)
            at.query_params["run"] = "1"
            at.run()
            assert not at.exception, [e.value for e in at.exception]
            at.switch_page("views/run.py").run()
            assert not at.exception, [e.value for e in at.exception]
            renders += 1
    finally:
        for p in procs:
            p.wait(300)
            stop(p)
    assert renders >= 1
    assert [r.status for r in store.list_runs()] == ["done", "done"]
    assert all(r.worker_id for r in store.list_runs())
    assert len(store.requests(1)) == len(store.requests(2)) == 8


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400))
def test_the_prompt_parser_takes_any_bytes_with_prompts_or_one_clear_error(data):
    try:
        prompts = parse_jsonl(data, "fuzz.jsonl")
    except PhoenixError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("fuzz.jsonl")
        return
    assert prompts and all(p.text.strip() for p in prompts)
    assert len({p.id for p in prompts}) == len(prompts)


@pytest.fixture(scope="module")
def filter_store(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'f.db'}"
    migrated(url)
    store = Store(url)
    store.create_run("alpha", {}, "embedded", "embedded", 1)
    return store


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=60), st.text(max_size=60), st.text(max_size=20))
def test_store_filters_take_any_text_as_a_bound_parameter(filter_store, name, model, status):
    df = filter_store.runs_frame(RunFilter(name=name, model=model, status=status))
    assert len(df) <= 1
    assert filter_store.requests_frame(1, mode=name, prompt=model).empty
    assert [r.name for r in filter_store.list_runs()] == ["alpha"]


def test_the_app_binds_to_localhost_by_default():
    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["address"] == "127.0.0.1"


def test_the_app_folder_carries_the_same_config_so_any_working_directory_binds_localhost():
    # Streamlit reads <script folder>/.streamlit/config.toml wherever it is started from.
    assert (ROOT / "app" / ".streamlit" / "config.toml").resolve() == (ROOT / ".streamlit" / "config.toml").resolve()


@pytest.mark.parametrize(
    "address, allowed",
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        (None, False),
        ("", False),
        ("0.0.0.0", False),
        ("10.0.0.5", False),
    ],
)
def test_runs_start_without_a_token_only_when_the_app_listens_on_loopback(address, allowed, monkeypatch):
    import app.actions as actions

    monkeypatch.delenv("PHOENIX_OPERATOR_TOKEN", raising=False)
    monkeypatch.setattr(actions.st, "get_option", lambda key: address)
    assert (actions.permission("") is None) is allowed


def test_starting_runs_needs_the_operator_token_when_one_is_set(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    url = f"sqlite:///{tmp_path / 'op.db'}"
    monkeypatch.setenv("PHOENIX_DB", url)
    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "0")
    monkeypatch.setenv("PHOENIX_OPERATOR_TOKEN", "s3cret-token")
    at = AppTest.from_file("../app/main.py", default_timeout=60)
    at.run()
    at.switch_page("views/new_run.py").run()
    at.get("form_submit_button")[0].click()
    at.run()
    assert any("operator token" in e.value for e in at.error)
    assert not Store(url).list_runs()
    at.text_input(key="n_token").input("s3cret-token")
    at.get("form_submit_button")[0].click()
    at.run()
    assert any("queued" in s.value for s in at.success), [e.value for e in at.error]
    assert len(Store(url).list_runs()) == 1
    shown = " ".join([c.value for c in at.code] + [m.value for m in at.markdown] + [str(dict(at.query_params))])
    assert "s3cret-token" not in shown
    assert b"s3cret-token" not in open(url.removeprefix("sqlite:///"), "rb").read()


@pytest.mark.subprocess
def test_a_locked_database_fails_the_bench_with_one_line(tiny_dirs, prompt_file, tmp_path, monkeypatch):
    db = tmp_path / "locked.db"
    migrated(f"sqlite:///{db}")
    blocker = sqlite3.connect(db)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        d = tiny_dirs["qwen3"]
        proc = one_request_bench(db, d, prompt_file, env={**os.environ, "PHOENIX_BUSY_TIMEOUT_MS": "300"})
    finally:
        blocker.rollback()
        blocker.close()
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: the database") and "locked" in proc.stderr
    assert "Traceback" not in proc.stderr


CPUINFO = "processor\t: 0\nmodel name\t: {model}\nflags\t\t: fpu sse avx2 avx512f {extra}\n"


def test_a_cpu_without_avx_vnni_is_named_as_the_reason_llama_server_cannot_run_here():
    from engine.engines.llamacpp import cpu_problem

    zen4 = cpu_problem(CPUINFO.format(model="AMD EPYC", extra="avx512_vnni"))
    assert zen4 is not None and "avx_vnni" in zen4 and "AMD EPYC" in zen4
    assert cpu_problem(CPUINFO.format(model="Intel Xeon", extra="avx_vnni amx_bf16")) is None


def test_a_llama_server_killed_by_an_illegal_instruction_says_so_in_one_line(tmp_path, monkeypatch):
    from engine.engines import llamacpp
    from engine.errors import PhoenixError

    monkeypatch.setattr(llamacpp, "command", lambda cfg: ["sh", "-c", "kill -ILL $$"])
    monkeypatch.setattr(llamacpp.process, "healthy", lambda url: False)
    monkeypatch.setattr(llamacpp, "cpu_problem", lambda: "the prebuilt llama-server needs avx_vnni")
    with pytest.raises(
        PhoenixError, match=r"^llama-server exited at start \(the prebuilt llama-server needs avx_vnni\); its log is "
    ):
        llamacpp.start(llamacpp.LlamaCppConfig(port=1), data_dir=tmp_path)
    assert not list(tmp_path.glob("*.pid"))  # nothing left that names a dead server
