"""Bad input, command by command: one table, one line per case. Each gives one clear line, exit status 2,
no traceback, and changes nothing. A new case is one more row."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from helpers import assert_one_line_error, migrated, run_cli

from db.store import Store


@pytest.fixture
def place(tmp_path):
    """Named files the cases point at: {ok} is a Phoenix database with one finished run."""
    ok = tmp_path / "ok.db"
    migrated(f"sqlite:///{ok}")
    Store(f"sqlite:///{ok}").create_run("one", {}, "embedded", "embedded", 0, status="done")
    (tmp_path / "notsqlite.txt").write_text("hello, not a database\n")
    (tmp_path / "corrupt.db").write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)
    with sqlite3.connect(tmp_path / "foreign.db") as conn:
        conn.execute("CREATE TABLE runs (their_column TEXT)")
    with sqlite3.connect(tmp_path / "unknown_rev.db") as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('f00dcafe')")
    (tmp_path / "folder").mkdir()
    lines = {
        "surrogate.jsonl": '{"id": "a", "prompt": "x \\ud800 y"}',
        "nul.jsonl": '{"id": "a", "prompt": "x\\u0000y"}',
        "dict_id.jsonl": '{"id": {"a": 1}, "prompt": "x"}',
        "long_id.jsonl": json.dumps({"id": "i" * 201, "prompt": "x"}),
        "newline_id.jsonl": '{"id": "a\\nb", "prompt": "x"}',
        "bool_id.jsonl": '{"id": true, "prompt": "x"}',
        "deep.jsonl": "[" * 5000 + "]" * 5000,
    }
    for name, line in lines.items():
        (tmp_path / name).write_text(line + "\n", encoding="utf-8")
    return lambda text: text.format(dir=tmp_path, ok=ok)


BIG = str(2**63)
CASES = [  # (argv, pattern of the one line)
    ("runs --db {dir}/notsqlite.txt", "is not a SQLite database, or it is corrupt"),
    ("show 1 --db {dir}/corrupt.db", "is not a SQLite database, or it is corrupt"),
    ("runs --db nosuchscheme://host/db", "unknown database kind .nosuchscheme."),
    ("db upgrade --db {dir}/unknown_rev.db", "at schema f00dcafe, which this Phoenix does not know"),
    (
        "db upgrade --db {dir}/foreign.db",
        r"already holds tables Phoenix did not version \(runs\).*--allow-foreign-tables",
    ),
    ("runs --db {dir}/foreign.db", "has tables but no Phoenix schema version"),
    (f"show {BIG} --db {{ok}}", "run ids are whole numbers from 1 to"),
    (f"export {BIG} --db {{ok}}", "run ids are whole numbers"),
    (f"resume {BIG} --db {{ok}}", "run ids are whole numbers"),
    (f"cancel {BIG} --db {{ok}}", "run ids are whole numbers"),
    ("show 0 --db {ok}", "run ids are whole numbers"),
    ("show -3 --db {ok}", "run ids are whole numbers"),
    ("show ٣ --db {ok}", "run ids are whole numbers"),  # an Arabic-Indic digit: int() takes it, SQL must not
    ("show 99 --db {ok}", "no run 99"),
    ("export 1 --db {ok} --out {dir}/missing/x.csv", r"the folder .*missing does not exist"),
    ("export 1 --db {ok} --out {dir}/folder", "is a folder; give a file path"),
    ("export 1 --db {ok} --out /proc/phoenix.csv", "cannot write --out|not writable"),
    ("worker --db {ok} --poll nan", "--poll must be a finite number"),
    ("worker --db {ok} --poll -1", "--poll must be a finite number"),
    ("worker --db {ok} --max-idle inf", "--max-idle must be a finite number"),
    ("show abc", "run ids are whole numbers"),
    ("bench --no-such-flag", r"unrecognized arguments: --no-such-flag; see `python -m engine bench --help`"),
    ("generate --k four", "--k expects a number, got 'four'"),
    ("bench --db {dir}/p.db --suffix-min-prob 2", r"--suffix-min-prob must be in 0\.\.1"),
    (
        "bench --db {dir}/p.db --suffix-max-spec-factor -1",
        "--suffix-max-spec-factor and --suffix-max-spec-offset must be finite numbers >= 0",
    ),
    ("bench --db {dir}/p.db --modes suffix_0", "k must be in 1..16"),
    (
        "bench --db {dir}/p.db --drafter tree",
        r"argument --drafter: invalid choice: 'tree' \(choose from 'model', 'ngram', 'suffix', 'eagle3', 'hybrid'\)",
    ),
    ("bench --db {dir}/p.db --dtype bogus", "argument --dtype: invalid choice: 'bogus'"),
    ("submit --db {dir}/p.db --device tpu", "--device must be auto, cpu, cuda, cuda:N or mps, got 'tpu'"),
    (
        "submit --db {dir}/p.db --suffix-max-spec-factor inf",
        "--suffix-max-spec-factor must be a finite number, got 'inf'",
    ),
    (
        "submit --db {dir}/p.db --suffix-max-spec-offset inf",
        "--suffix-max-spec-offset must be a finite number, got 'inf'",
    ),
    ("submit --db {dir}/p.db --shadow-rate nan", "--shadow-rate must be a finite number, got 'nan'"),
    ("distill --lr inf", "--lr must be a finite number, got 'inf'"),
    ("engines side-by-side --db {dir}/p.db --spec-types ngram-simple", "--spec-types must start with none"),
    ("engines side-by-side --db {dir}/p.db --spec-types none,draft-simple-x", "--spec-types: unknown 'draft-simple-x'"),
    ("engines sweep --db {dir}/p.db --engine tgi", "argument --engine: invalid choice: 'tgi'"),
    ("llamacpp start --spec-type draft-simple", "--spec-type draft-simple needs --draft-model"),
    ("llamacpp start --spec-type ngram-simple --draft-max 0", "--draft-max must be in 1..64, got 0"),
    ("llamacpp start --model {dir}/missing.gguf", "no such GGUF file"),
    ("submit --db {dir}/p.db --name " + "x" * 201, "--name is 201 characters; at most 200"),
    ("generate --drafter suffix --suffix-max-tree-depth 0", "--suffix-max-tree-depth must be >= 1"),
    ("bench --db {dir}/p.db --prompts {dir}/surrogate.jsonl", r"line 1's prompt holds an unpaired surrogate"),
    ("bench --db {dir}/p.db --prompts {dir}/nul.jsonl", "line 1's prompt holds a NUL character"),
    ("bench --db {dir}/p.db --prompts {dir}/dict_id.jsonl", "line 1's id must be a string or a whole number"),
    ("bench --db {dir}/p.db --prompts {dir}/bool_id.jsonl", "line 1's id must be a string or a whole number"),
    ("bench --db {dir}/p.db --prompts {dir}/long_id.jsonl", r"line 1's id must be 1\.\.200 printable characters"),
    ("bench --db {dir}/p.db --prompts {dir}/newline_id.jsonl", "printable characters"),
    ("bench --db {dir}/p.db --prompts {dir}/deep.jsonl", "line 1 nests too deeply to be a prompt row"),
]


def snapshot(place) -> dict:
    """What must not change: the files that are not databases byte for byte, the databases' tables and runs."""
    out = {name: Path(place(f"{{dir}}/{name}")).read_bytes() for name in ("notsqlite.txt", "corrupt.db")}
    for name in ("ok.db", "foreign.db", "unknown_rev.db"):
        with closing(sqlite3.connect(place(f"{{dir}}/{name}"))) as conn:
            tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
            out[name] = (tables, conn.execute("SELECT * FROM runs").fetchall() if "runs" in tables else None)
    return out


@pytest.mark.parametrize("argv, pattern", CASES, ids=[c[0].split(" --db")[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(capsys, place, argv, pattern):
    before = snapshot(place)
    code, _, err = run_cli(capsys, *place(argv).split(" "))
    assert_one_line_error(code, err, pattern)
    assert snapshot(place) == before
    assert not Path(place("{dir}/p.db")).exists()


@pytest.mark.parametrize(
    "data, expected",
    [
        ('{"id": "a", "prompt": "x\u2028y"}\n'.encode(), [("a", "x\u2028y")]),  # JSON allows U+2028 raw in strings
        ('{"id": "a", "prompt": "x\u0085y\u2029"}\n'.encode(), [("a", "x\u0085y\u2029")]),
        (b'\xef\xbb\xbf{"id": "a", "prompt": "xy"}\n', [("a", "xy")]),  # a UTF-8 BOM
        (b'{"id": "a", "prompt": "x"}\r\n{"id": 7, "prompt": "y"}\r\n', [("a", "x"), ("7", "y")]),  # CRLF
    ],
)
def test_good_prompt_files_with_unusual_separators_parse(data, expected):
    from engine.prompts.sets import parse_jsonl

    assert [(p.id, p.text) for p in parse_jsonl(data, "p.jsonl")] == expected


@pytest.mark.parametrize("name", ["two\nlines", "bell\x07", "escape \x1b[31mred"])
def test_a_run_name_that_would_rewrite_a_terminal_is_refused_before_queueing(capsys, tmp_path, name):
    db = tmp_path / "q.db"
    code, _, err = run_cli(capsys, "submit", "--db", str(db), "--name", name)
    assert_one_line_error(code, err, "--name must be printable text on one line")
    assert not db.exists()


@pytest.mark.parametrize(
    "argv",
    [["note", "1", "--text", "caf\udce9"], ["submit", "--name", "r\udcff"], ["generate", "--prompt", "def f(\udc80):"]],
)
def test_arguments_that_are_not_utf8_are_one_line_before_anything_runs(capsys, argv):
    code, _, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, r"is not valid UTF-8 text; pass it in UTF-8")


@pytest.mark.parametrize(
    "argv",
    [
        ["zoo", "build", "--out", "{mine}"],  # writes {out}/target and {out}/draft
        ["zoo", "build-draft", "smollm2", "--out", "{mine}/target"],
        ["distill", "--out", "{mine}/target", "--prompts", "humaneval-train"],
        ["zoo", "fetch", "smollm2", "--out", "{mine}/target"],
    ],
)
def test_no_command_writes_a_model_over_a_folder_it_did_not_make(capsys, tmp_path, argv):
    mine = tmp_path / "mine"
    (mine / "target").mkdir(parents=True)
    (mine / "target" / "config.json").write_text('{"mine": true}')
    code, _, err = run_cli(capsys, *[a.format(mine=mine) for a in argv])
    assert_one_line_error(code, err, "already holds files that Phoenix did not write; nothing was changed")
    assert (mine / "target" / "config.json").read_text() == '{"mine": true}'
    assert sorted(p.name for p in (mine / "target").iterdir()) == ["config.json"]
