"""The tracking store: migrations, round trips, aggregates, and clear errors."""

from __future__ import annotations

import sqlite3

import pytest
from helpers import assert_one_line_error, migrated, request_record, run_cli
from sqlalchemy import create_engine, inspect

from db import migrate
from db.entities import BanditRecord, PositionCount
from db.models import Base
from db.store import Store, StoreError, resolve_url


@pytest.fixture
def url(any_db_url):
    return any_db_url  # SQLite and PostgreSQL


@pytest.fixture
def store(any_store):
    return any_store


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path / 'phoenix.db'}"


@pytest.fixture
def sqlite_store(sqlite_url):
    return Store(migrated(sqlite_url))


def test_migrations_reach_head_and_match_the_models(url):
    assert migrate.upgrade(url) == migrate.head()
    engine = create_engine(url)
    request_cleanup = engine.dispose
    insp = inspect(engine)
    for table in Base.metadata.sorted_tables:
        db_cols = {c["name"] for c in insp.get_columns(table.name)}
        assert db_cols == {c.name for c in table.columns}, table.name
        model_idx = {i.name for i in table.indexes}
        assert model_idx <= {i["name"] for i in insp.get_indexes(table.name)}, table.name
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    request_cleanup()


def test_sqlite_connections_use_wal_foreign_keys_and_busy_timeout(sqlite_store):
    store = sqlite_store
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000


def test_requests_round_trip_with_positions_and_bandit_steps(store):
    run = store.create_run("r", {"bench": {"seed": 1}}, "t", "d", total=2)
    rec = request_record(
        run.id,
        0,
        mode="bandit",
        positions=[PositionCount(0, 3, 2), PositionCount(1, 3, 1)],
        bandit=BanditRecord(
            t=0,
            epsilon=1.0,
            explored=True,
            chosen_k=4,
            arm_means={"4": 10.0},
            arm_counts={"4": 1},
            reward=10.0,
            policy="ucb1",
            fallback=True,
        ),
    )
    store.add_requests([rec, request_record(run.id, 1)])
    got = store.requests(run.id)
    assert [r.seq for r in got] == [0, 1]
    assert got[0].positions == [PositionCount(0, 3, 2), PositionCount(1, 3, 1)]
    assert got[0].latency_s == rec.latency_s and got[0].trace_id == rec.trace_id
    steps = store.bandit_steps(run.id)
    assert steps == [(0, rec.bandit)]  # the step read back equals the one written, field by field
    assert type(got[0]).__module__ == "db.entities"  # plain entities, not ORM rows


def test_mode_summaries_aggregate_in_sql_and_leave_warmups_out(store):
    run = store.create_run("r", {}, "t", "d", total=4)
    store.add_requests(
        [
            request_record(run.id, 0, mode="target", k=0, latency=2.0, tokens=20, proposed=0, accepted=0, warmup=True),
            request_record(
                run.id, 1, mode="target", k=0, latency=2.0, tokens=20, proposed=0, accepted=0, identical=True
            ),
            request_record(run.id, 2, mode="model_4", latency=1.0, tokens=20, proposed=8, accepted=6, identical=True),
            request_record(
                run.id,
                3,
                mode="model_4",
                latency=3.0,
                tokens=20,
                proposed=8,
                accepted=2,
                identical=False,
                diverged_at=5,
            ),
        ]
    )
    by = {m.mode: m for m in store.mode_summaries(run.id)}
    assert by["target"].n == 1 and by["target"].tokens_per_s == 10.0
    assert by["model_4"].tokens_per_s == pytest.approx((20 / 1.0 + 20 / 3.0) / 2)  # the mean of per-request tokens/s
    assert by["model_4"].acceptance == 8 / 16
    assert by["model_4"].tokens_per_pass == 1 + 8 / 6  # tokens per verify pass, every pass, bonus included
    assert by["model_4"].mean_acceptance_length is None  # these rows keep no per-position counts: no drafts known
    assert by["model_4"].p50_latency_s == 2.0 and by["model_4"].mean_latency_s == 2.0
    assert (by["model_4"].identical_n, by["model_4"].checked_n) == (1, 2)


def test_mean_acceptance_length_is_vllms_and_failed_requests_are_apart_from_every_figure(store):
    """vLLM's mean acceptance length counts the passes that drafted (position 0's proposed), not every pass; a
    refused request (a 429 after 3 s) is a failure, never an n, a latency or a 0 tok/s averaged in."""
    from engine.measure import PositionCount

    run = store.create_run("r", {}, "t", "d", total=4)
    drafted = [PositionCount(0, 2, 2, 2), PositionCount(1, 2, 1, 2)]  # 2 of its 3 passes drafted
    store.add_requests(
        [
            request_record(run.id, 0, proposed=4, accepted=3, positions=drafted),
            request_record(run.id, 1, proposed=4, accepted=3, positions=drafted, latency=2.0),
            request_record(run.id, 2, proposed=0, accepted=0, latency=3.0, tokens=0, error="429 Too Many Requests"),
            request_record(run.id, 3, proposed=0, accepted=0, latency=3.0, tokens=0, error="429 Too Many Requests"),
        ]
    )
    (m,) = store.mode_summaries(run.id)
    assert (m.n, m.failed) == (2, 2)
    assert m.mean_acceptance_length == 1 + 6 / 4 and m.tokens_per_pass == 1 + 6 / 6
    assert m.p95_latency_s == pytest.approx(1.95) and m.tokens_per_s == pytest.approx((10 / 1 + 10 / 2) / 2)


def test_positions_sum_per_mode_and_arm(store):
    run = store.create_run("r", {}, "t", "d", total=2)
    store.add_requests(
        [request_record(run.id, i, positions=[PositionCount(0, 2, 2, 2), PositionCount(1, 2, 1, 2)]) for i in range(2)]
    )
    rows = store.positions(run.id).to_dict(orient="records")
    assert rows == [
        {"mode": "model_4", "k": 4, "position": 0, "proposed": 4, "accepted": 4, "reached": 4},
        {"mode": "model_4", "k": 4, "position": 1, "proposed": 4, "accepted": 2, "reached": 4},
    ]


@pytest.mark.parametrize(
    "latencies", [[1.0], [3.0, 1.0], [5.0, 1.0, 2.0, 4.0, 3.0], [0.1 * i for i in range(37, 0, -1)]]
)
def test_latency_percentiles_in_sql_equal_numpys(store, latencies):
    import numpy as np

    run = store.create_run("r", {}, "t", "d", total=len(latencies))
    store.add_requests([request_record(run.id, i, latency=lat) for i, lat in enumerate(latencies)])
    (m,) = store.mode_summaries(run.id)
    assert m.p50_latency_s == pytest.approx(np.percentile(latencies, 50))
    assert m.p95_latency_s == pytest.approx(np.percentile(latencies, 95))


@pytest.mark.parametrize("points,width", [(100, 1), (4, 3)])
def test_the_bandit_history_is_aggregated_into_windows_of_decisions(any_store, points, width):
    store = any_store
    run = store.create_run("r", {}, "t", "d", total=10)
    recs = []
    for t in range(10):
        rec = request_record(run.id, t, mode="bandit", k=[0, 2, 4][t % 3], trace_id=f"{t:032x}")
        rec.bandit = BanditRecord(
            t=t,
            explored=t < 3,
            chosen_k=rec.k,
            arm_means={"2": float(t)},
            arm_counts={"2": t},
            reward=float(t),
            epsilon=0.1 * t,
        )
        recs.append(rec)
    store.add_requests(recs)
    h = store.bandit_history(run.id, points=points)
    windows = list(range(0, 10, width))
    assert h["signals"]["t"].tolist() == windows and h["signals"]["n"].sum() == 10
    first = list(range(min(width, 10)))
    assert h["signals"]["epsilon"].iloc[0] == pytest.approx(sum(0.1 * t for t in first) / len(first))
    assert h["signals"]["p_not_best"].isna().all()
    assert h["means"]["t"].tolist() == [min(w + width, 10) - 1 for w in windows]  # each window's last decision
    assert h["choices"]["n"].sum() == 10 and set(h["choices"]["chosen_k"]) == {0, 2, 4}


@pytest.mark.parametrize(
    "value,expected",
    [
        ("x.db", "sqlite:///x.db"),
        ("sqlite:////tmp/a.db", "sqlite:////tmp/a.db"),
        ("postgresql+psycopg://u:p@h/db", "postgresql+psycopg://u:p@h/db"),
    ],
)
def test_db_location_is_a_url_or_a_path(value, expected):
    assert resolve_url(value) == expected


def test_db_location_falls_back_to_env_then_default(monkeypatch):
    monkeypatch.setenv("PHOENIX_DB", "/tmp/env.db")
    assert resolve_url(None) == "sqlite:////tmp/env.db"
    monkeypatch.delenv("PHOENIX_DB")
    assert resolve_url(None) == "sqlite:///data/phoenix.db"


def test_empty_database_is_created_at_head(url):
    migrate.ensure_schema(url)
    assert migrate.current(url) == migrate.head()


def test_a_schema_behind_head_names_the_exact_upgrade_command(url):
    previous = (
        migrate.ScriptDirectory.from_config(migrate.alembic_config(url)).get_revision(migrate.head()).down_revision
    )
    migrate.upgrade(url, previous)
    with pytest.raises(
        StoreError,
        match=rf"is at schema {previous}, behind {migrate.head()}; "
        r"run `python -m engine db upgrade --db '.*'`",
    ):
        migrate.ensure_schema(url)


def test_a_schema_newer_than_this_phoenix_says_to_upgrade_phoenix(url):
    from sqlalchemy import text

    migrate.upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'base0'"))
    engine.dispose()
    with pytest.raises(StoreError, match="newer than this Phoenix"):
        migrate.ensure_schema(url)


def test_unversioned_database_with_tables_asks_for_upgrade(sqlite_url, tmp_path):
    url = sqlite_url
    with sqlite3.connect(tmp_path / "phoenix.db") as conn:
        conn.execute("CREATE TABLE runs (id INTEGER)")
    with pytest.raises(StoreError, match=r"python -m engine db upgrade --db 'sqlite:///.*phoenix.db'"):
        migrate.ensure_schema(url)


def test_unwritable_database_path_is_one_clear_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # root ignores permission bits, so block with a file
    with pytest.raises(StoreError, match="cannot create the database folder .*pass --db"):
        Store(f"sqlite:///{blocker / 'sub' / 'x.db'}")


def test_locked_database_fails_with_a_clear_message_and_keeps_rows(sqlite_store, tmp_path, monkeypatch):
    store = sqlite_store
    import db.connect as connect

    run = store.create_run("r", {}, "t", "d", total=1)
    store.add_requests([request_record(run.id, 0)])
    monkeypatch.setattr(connect, "BUSY_TIMEOUT_MS", 100)
    short = Store(store.url)
    blocker = sqlite3.connect(tmp_path / "phoenix.db")
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="locked by another writer"):
            short.add_requests([request_record(run.id, 1)])
    finally:
        blocker.rollback()
        blocker.close()
    assert [r.seq for r in store.requests(run.id)] == [0]


def test_an_unreachable_database_server_is_one_line_without_the_password():
    url = "postgresql+psycopg://phoenix:s3cret@127.0.0.1:1/phoenix"
    with pytest.raises(StoreError) as err:
        migrate.ensure_schema(url)
    assert "cannot reach the database server" in str(err.value) and "s3cret" not in str(err.value)
    assert "\n" not in str(err.value)


def test_exported_csv_neutralises_cells_a_spreadsheet_would_run_and_json_stays_exact(sqlite_store):
    import csv
    import io
    import json

    from engine.export.files import export

    run = sqlite_store.create_run("r", {}, "t", "d", total=2)
    rows = [request_record(run.id, 0), request_record(run.id, 1)]
    rows[0].output_text, rows[1].output_text, rows[1].prompt_id = '=HYPERLINK("http://x")', "@SUM(A1)", "+cmd"
    sqlite_store.add_requests(rows)
    cells = list(csv.DictReader(io.StringIO(export(sqlite_store, run.id, "csv"))))
    assert [c["output_text"] for c in cells] == ['\'=HYPERLINK("http://x")', "'@SUM(A1)"]
    assert cells[1]["prompt_id"] == "'+cmd" and cells[0]["latency_s"] == "1.0"
    exact = json.loads(export(sqlite_store, run.id, "json"))["requests"]
    assert [r["output_text"] for r in exact] == ['=HYPERLINK("http://x")', "@SUM(A1)"]


def test_a_database_this_process_cannot_write_is_read_and_only_writes_are_refused(capsys, tmp_path, monkeypatch):
    """A read-only mount, simulated (tests run as root, for whom permission bits do not bind): runs, show, report
    and export read it; a write is one line and the file is unchanged."""
    import os

    db = tmp_path / "ro" / "phoenix.db"
    url = migrated(f"sqlite:///{db}")
    store = Store(url)
    run = store.create_run("frozen", {"bench": {}}, "embedded", "embedded", 1, status="done")
    store.add_requests([request_record(run.id, 0)])
    store.engine.dispose()
    before = db.read_bytes()
    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda p, mode: False if str(p).startswith(str(db.parent)) and mode == os.W_OK else real_access(p, mode),
    )
    for argv in (["runs"], ["show", "1"], ["report", "1", "--format", "md"], ["export", "1", "--format", "json"]):
        code, out, err = run_cli(capsys, *argv, "--db", str(db))
        assert code == 0 and ("frozen" in out + err or "model_4" in out), (argv, err)
    code, _, err = run_cli(capsys, "tag", "1", "x", "--db", str(db))
    assert_one_line_error(code, err, "is read-only here")
    assert db.read_bytes() == before


def test_a_stored_config_this_version_cannot_parse_is_surfaced_on_the_run_not_swallowed(tmp_path, monkeypatch):
    from apptest import open_page
    from helpers import migrated

    from engine.bench.config import stored

    url = migrated(f"sqlite:///{tmp_path / 'c.db'}")
    Store(url).create_run("odd", {"bench": {"modes": ["target"], "warp_speed": 9}}, "embedded", None, 0, status="done")
    info = Store(url, bench_parser=stored).get_run(1)
    assert info.bench is None and "warp_speed" in info.config_error
    monkeypatch.setenv("PHOENIX_DB", url)
    at = open_page("run", run=1)
    assert any("warp_speed" in c.value for c in at.code)


def test_old_runs_rows_are_renamed_after_their_drafter_and_watch_rows_become_intervals(url):
    """Migrations 0020 and 0021 on rows written the old way, on SQLite and PostgreSQL."""
    migrate.upgrade(url, "0019")
    engine = create_engine(url)
    with engine.begin() as conn:
        for rid, cfg in (
            (1, '{"bench": {"drafter": "eagle3", "modes": ["target", "fixed_3"]}}'),
            (2, '{"bench": {"modes": ["fixed_4", "ngram_4"]}}'),
            (3, '{"serve_watch": {}}'),
        ):
            conn.exec_driver_sql(
                "INSERT INTO runs (id, name, status, created_at, config, target, progress_done, progress_total, "
                f"cancel_requested, archived) VALUES ({rid}, 'r', 'done', '2026-11-30', '{cfg}', 't', 0, 0, "
                "false, false)"
            )
        rows = [
            (1, 1, "fixed_3", "p0"),
            (2, 2, "fixed_4", "p0"),
            (3, 2, "ngram_4", "p0"),
            (4, 3, "vllm_watch", "interval-0"),
        ]
        for rid, run, mode, prompt in rows:
            conn.exec_driver_sql(
                "INSERT INTO requests (id, run_id, seq, mode, k, prompt_id, prompt_tokens, output_tokens, latency_s, "
                "tokens_per_s, proposed, accepted, passes, draft_s, verify_s, output_text, output_sha256, warmup, "
                f"created_at) VALUES ({rid}, {run}, {rid}, '{mode}', 4, '{prompt}', 1, 20, 2.0, 10.0, 40, 30, 10, "
                "0, 0, '', '', false, '2026-11-30')"
            )
        for pos, acc in enumerate((9, 7)):
            conn.exec_driver_sql(
                f"INSERT INTO request_positions (request_id, position, proposed, accepted) VALUES (4, {pos}, 10, {acc})"
            )
    engine.dispose()
    assert migrate.upgrade(url) == migrate.head()
    store = Store(url)
    assert [r.mode for r in store.requests(1)] == ["eagle3_3"] and store.get_run(1).config["bench"]["modes"] == [
        "target",
        "eagle3_3",
    ]
    assert [r.mode for r in store.requests(2)] == ["model_4", "ngram_4"]  # no --drafter: the draft model
    assert store.requests(3) == []
    (iv,) = store.intervals(3)
    assert (iv.seq, iv.drafts, iv.draft_tokens, iv.accepted, iv.per_position) == (4, 10, 40, 30, [9, 7])
    assert iv.seconds == 2.0


def test_list_runs_reads_every_run_unless_a_page_bounds_it(store):
    ids = [store.create_run(f"r{i}", {}, "t", "d", total=1).id for i in range(5)]
    assert [r.id for r in store.list_runs()] == ids[::-1]  # every run, newest first: no silent cut (was 1,000)
    assert [r.id for r in store.list_runs(limit=2)] == ids[::-1][:2]
