"""The CLI: a thin layer whose bad inputs get one clear line, exit 2, and no writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_one_line_error, pair_flags, run_cli

ROOT = Path(__file__).resolve().parent.parent


def test_generate_json_prints_exactly_one_object_with_the_stats(capsys, tiny_dirs):
    d = tiny_dirs["qwen3"]
    code, out, _ = run_cli(
        capsys,
        "generate",
        "--target",
        d["target"],
        "--draft",
        d["near"],
        "--device",
        "cpu",
        "--k",
        "3",
        "--max-new-tokens",
        "10",
        "--prompt",
        "def f(x):",
        "--json",
    )
    assert code == 0
    stats = json.loads(out)
    assert stats["output_tokens"] == len(stats["output_ids"]) <= 10
    assert stats["proposed"] == sum(p["proposed"] for p in stats["per_position"])
    assert stats["accepted"] == sum(p["accepted"] for p in stats["per_position"])
    for key in ("draft_s", "verify_s", "ttft_s", "latency_s", "tokens_per_s", "passes", "prompt_tokens"):
        assert key in stats


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["generate", "--target", "/no/such/model"], "not found"),
        (["generate", "--target", "nobody/no-such-model"], "not in the local Hugging Face cache"),
        (["generate", "--prompt", ""], "prompt is empty"),
        (["generate", "--prompt", "   "], "prompt is empty"),
        (["generate", "--k", "17"], r"k=17 is out of range: use 0\.\.16"),
        (["generate", "--k", "-1"], "out of range"),
        (["generate", "--prompt-format", "markdown"], "argument --prompt-format: invalid choice: 'markdown'"),
        (
            ["generate", "--loop", "hf", "--drafter", "suffix"],
            "--loop hf drafts with the draft model or prompt lookup",
        ),
        (["generate", "--drafter", "none", "--k", "4"], "k=4 needs a drafter"),
    ],
)
def test_bad_generate_input_is_one_clear_line(capsys, argv, pattern):
    code, _, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, pattern)


def test_a_directory_that_is_not_a_model_is_refused(capsys, tmp_path):
    code, _, err = run_cli(capsys, "generate", "--target", str(tmp_path))
    assert_one_line_error(code, err, "not a model")


def test_draft_with_another_tokenizer_is_refused_before_any_work(capsys, tiny_dirs, other_vocab_dir):
    code, _, err = run_cli(
        capsys, "generate", "--target", tiny_dirs["qwen3"]["target"], "--draft", other_vocab_dir, "--device", "cpu"
    )
    assert_one_line_error(code, err, "different tokenizers")


@pytest.mark.parametrize(
    "extra,pattern",
    [
        (["--modes", "target,turbo_4"], "unknown mode 'turbo_4'"),
        (["--modes", "target,target"], "repeats a mode"),
        (["--arms", "0,2,2"], "repeats an arm"),
        (["--arms", "0,40"], "out of range"),
        (["--max-new-tokens", "0"], "max-new-tokens must be in"),
        (["--max-new-tokens", "999999"], "max-new-tokens must be in"),
        (["--modes", "model_0"], "k must be in"),
    ],
)
def test_bad_bench_options_write_nothing(capsys, tmp_path, extra, pattern):
    db = tmp_path / "p.db"
    code, _, err = run_cli(capsys, "bench", "--db", str(db), *extra)
    assert_one_line_error(code, err, pattern)
    assert not db.exists()


@pytest.mark.parametrize(
    "content,pattern",
    [
        (b"", "no prompts"),
        (b'{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": \n', "line 2 is not valid JSON"),
        (b'{"id": "a", "prompt": "\xff\xfe"}\n', "not UTF-8"),
        (b'{"id": "a", "prompt": ""}\n', "line 1 has an empty prompt"),
    ],
)
def test_bad_prompt_files_name_the_problem(capsys, tmp_path, content, pattern):
    path = tmp_path / "p.jsonl"
    path.write_bytes(content)
    db = tmp_path / "p.db"
    code, _, err = run_cli(capsys, "bench", "--db", str(db), "--prompts", str(path))
    assert_one_line_error(code, err, pattern)
    assert not db.exists()


def test_bench_then_runs_show_and_export_read_the_database(capsys, tiny_dirs, prompt_file, tmp_path):
    d = tiny_dirs["qwen3"]
    db = str(tmp_path / "p.db")
    code, out, err = run_cli(
        capsys,
        "bench",
        "--db",
        db,
        *pair_flags(d, prompt_file, cpu=True),
        "--limit",
        "2",
        "--max-new-tokens",
        "8",
        "--modes",
        "target,model_2",
    )
    assert code == 0, err
    assert "model_2" in out and "x target (IQR)" in out
    code, out_show, _ = run_cli(capsys, "show", "1", "--db", db)
    assert code == 0 and out.strip().splitlines()[-1] in out_show  # same table, recomputed from the DB
    code, runs, _ = run_cli(capsys, "runs", "--db", db)
    assert "done" in runs
    assert run_cli(capsys, "tag", "1", "draft-v2", "--db", db)[0] == 0
    code, js, _ = run_cli(capsys, "export", "1", "--db", db, "--format", "json")
    exported = json.loads(js)
    rows = exported["requests"]
    assert exported["run"]["tags"] == ["draft-v2"] and exported["run"]["config"]["bench"]["modes"] == [
        "target",
        "model_2",
    ]
    assert len(rows) == 6 and {r["mode"] for r in rows} == {"target", "model_2"}
    code, csv_text, _ = run_cli(capsys, "export", "1", "--db", db, "--format", "csv")
    assert csv_text.splitlines()[0].startswith("id,run_id,seq,mode,k") and len(csv_text.splitlines()) == 7
    code, _, err = run_cli(capsys, "show", "99", "--db", db)
    assert_one_line_error(code, err, "no run 99")


def test_db_upgrade_then_an_unversioned_database_names_the_command(capsys, tmp_path):
    import sqlite3

    db = tmp_path / "p.db"
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", str(db))
    from db.migrate import head

    assert code == 0 and out.strip().endswith(f"is at schema {head()}")
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE alembic_version")
    code, _, err = run_cli(capsys, "runs", "--db", str(db))
    assert_one_line_error(code, err, r"run `python -m engine db upgrade --db 'sqlite:///")


@pytest.mark.subprocess
def test_the_module_entry_point_exits_2_without_a_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "generate", "--k", "99"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: k=99 is out of range: use 0..16"


@pytest.mark.subprocess
def test_a_printing_command_ends_quietly_when_its_reader_closes_the_pipe(tmp_path):
    from helpers import build_db

    db = f"sqlite:///{tmp_path / 'many.db'}"
    store = build_db(db)
    for i in range(400):  # more lines than one pipe buffer, so the writer meets the closed pipe
        store.create_run(f"r{i}", {"bench": {}}, "embedded", None, 0, status="done")
    proc = subprocess.run(
        f"{sys.executable} -m engine runs --db '{db}' | head -1",
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_a_hub_id_in_the_local_cache_loads_through_the_same_path(capsys, tiny_dirs, tmp_path, monkeypatch):
    import shutil

    snap = tmp_path / "hub" / "models--Qwen--Qwen3-Tiny" / "snapshots" / ("a" * 40)
    shutil.copytree(tiny_dirs["qwen3"]["target"], snap)
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    code, out, err = run_cli(
        capsys,
        "generate",
        "--target",
        "Qwen/Qwen3-Tiny",
        "--draft",
        tiny_dirs["qwen3"]["near"],
        "--device",
        "cpu",
        "--k",
        "2",
        "--max-new-tokens",
        "6",
        "--prompt",
        "x = 1",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["output_tokens"] == 6


def test_resume_of_a_run_whose_worker_may_be_alive_says_how_long_to_wait(capsys, store, db_url):
    from engine.queue.worker import worker_id

    run = store.create_run("live", {"bench": {}}, "embedded", "embedded", 3)
    store.attach(run.id, worker_id())  # this very process: provably alive
    code, _, err = run_cli(capsys, "resume", str(run.id), "--db", db_url)
    assert_one_line_error(
        code, err, r"run 1 is running \(worker .*, last heartbeat \d+ s ago\); cancel it, or retry in (29|30) s"
    )
    assert store.get_run(run.id).status == "running"


def test_the_package_map_names_every_package_and_is_generated_from_their_docstrings():
    from engine.cli import reference
    from engine.paths import ROOT

    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "engine").glob("*/__init__.py")}
    mapped = {path.rsplit("/", 1)[0] for _, path in reference.PACKAGES}
    assert packages <= mapped, f"packages missing from the map: {sorted(packages - mapped)}"
    architecture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert reference.package_map(full=True) in architecture and "engine/vllm" not in architecture
    assert "docs/architecture.md" in (ROOT / "README.md").read_text(encoding="utf-8")  # the README links the map


def test_the_cli_reference_in_docs_is_the_parsers_own_help():
    from engine.cli import reference

    assert reference.main(["--check"]) == 0, "docs/cli.md is stale: run `python -m engine.cli.reference`"
    text = reference.render()
    assert "## bench" in text and "--max-new-tokens MAX_NEW_TOKENS" in text and "## zoo fetch" in text


def test_every_command_group_has_a_description_and_an_example_that_parses():
    """`--help` of each command says what it does and shows one command that really parses (issue 50)."""
    import shlex

    from engine.cli import build_parser
    from engine.cli.examples import EXAMPLES

    parser = build_parser()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
    assert set(sub.choices) == set(EXAMPLES)
    for name, p in sub.choices.items():
        assert p.description and "example:" in (p.epilog or ""), name
        for line in EXAMPLES[name].splitlines():
            if line.strip().startswith("python -m engine"):
                args = parser.parse_args(shlex.split(line)[3:])  # argparse exits on a flag that does not exist
                assert args.command == name


HELP_PROBE = """
import argparse, contextlib, io, sys
from engine.cli import main

def parsers(p):
    yield p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from parsers(child)

from engine.cli import build_parser
for p in parsers(build_parser()):
    p.format_help()
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(["bench", "--help"])
print(sorted(m for m in ("torch", "transformers", "safetensors", "peft") if m in sys.modules))
"""


def test_help_of_every_command_loads_no_tensor_library():
    """`--help` took 8-11 s because torch and transformers were imported to build the parser (issue 50): the
    config dataclasses the flags come from import neither, and every command imports what it runs when it runs."""
    out = subprocess.run(
        [sys.executable, "-c", HELP_PROBE],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"--help imported {out.stdout.strip()}"
