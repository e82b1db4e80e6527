"""`export RUN --to mlflow`: a run in a local SQLite MLflow tracking store, read back with MlflowClient."""

from __future__ import annotations

import importlib.util
import os

import pytest
from helpers import build_db

from engine.bench import report
from engine.export.mlflow import MlflowTarget, export_run

pytestmark = [
    pytest.mark.extras,  # an MLflow tracking store takes ~2 s to create: outside the working loop
    pytest.mark.skipif(
        importlib.util.find_spec("mlflow") is None and not os.environ.get("PHOENIX_REQUIRE_MLFLOW"),
        reason="mlflow-skinny is not installed (requirements-mlflow.txt; .ci/run installs it)",
    ),
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("mlflow")  # one tracking store for the module: MLflow migrates it in ~2 s
    store = build_db(f"sqlite:///{tmp_path / 'p.db'}")
    store.add_tags(1, ["baseline", "smollm2"])
    store.set_note(1, "why this run: the draft at k=4")
    target = MlflowTarget(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="phoenix-test")
    return store, target, export_run(store, 1, target)


def _client(target):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=target.tracking_uri)


def test_a_run_lands_in_mlflow_with_params_metrics_per_position_steps_tags_note_and_artifacts(exported):
    store, target, done = exported
    client = _client(target)
    run = client.get_run(done["run_id"])
    assert (
        run.data.params["bench.modes"] == str(["target", "model_4", "bandit"])
        and run.data.params["target"] == "embedded"
    )
    fixed = next(m for m in report.summaries(store, 1) if m.mode == "model_4")
    assert run.data.metrics["model_4/tokens_per_s"] == pytest.approx(fixed.tokens_per_s)
    assert run.data.metrics["model_4/speedup"] == pytest.approx(fixed.speedup.median)
    history = client.get_metric_history(done["run_id"], "model_4/k4/acceptance_per_position")
    # every model_4 request proposes 12 per position and accepts 12, 9, 6, 3
    assert [(m.step, round(m.value, 6)) for m in sorted(history, key=lambda m: m.step)] == [
        (1, 1.0),
        (2, 0.75),
        (3, 0.5),
        (4, 0.25),
    ]
    assert run.data.tags["phoenix.tags"] == "baseline,smollm2" and run.data.tags["phoenix.tag.baseline"] == "true"
    assert run.data.tags["mlflow.note.content"] == "why this run: the draft at k=4" and run.info.status == "FINISHED"
    assert sorted(a.path for a in client.list_artifacts(done["run_id"])) == ["run1-report.md", "run1-requests.csv"]


def test_exporting_again_updates_the_same_mlflow_run_without_duplicating_a_point(exported):
    store, target, first = exported
    again = export_run(store, 1, target)
    client = _client(target)
    assert again["run_id"] == first["run_id"] and again["updated"] and again["params"] == 0
    assert len(client.search_runs([client.get_experiment_by_name("phoenix-test").experiment_id])) == 1
    assert len(client.get_metric_history(first["run_id"], "model_4/k4/acceptance_per_position")) == 4
    assert store.get_run(1).config["mlflow"]["run_id"] == first["run_id"]


def test_without_mlflow_the_export_is_one_line_naming_the_install_command(monkeypatch, tmp_path):
    import builtins

    from engine.errors import PhoenixError

    real = builtins.__import__

    def no_mlflow(name, *args, **kwargs):
        if name.startswith("mlflow"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mlflow)
    store = build_db(f"sqlite:///{tmp_path / 'p.db'}")
    with pytest.raises(PhoenixError, match="requirements-mlflow.txt"):
        export_run(store, 1, MlflowTarget(tracking_uri=f"sqlite:///{tmp_path / 'm.db'}"))


@pytest.mark.parametrize(
    ("uri", "stored"),
    [
        ("http://user:hunter2@mlflow.internal:5000/", "http://user:***@mlflow.internal:5000/"),
        ("https://me:s%40cret@example.org/mlflow", "https://me:***@example.org/mlflow"),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("sqlite:////tmp/mlflow.db", "sqlite:////tmp/mlflow.db"),
        ("databricks", "databricks"),  # MLflow takes it; SQLAlchemy cannot parse it
    ],
)
def test_a_tracking_uris_password_is_never_stored_with_the_run(uri, stored):
    from db.store import safe_url

    assert safe_url(uri) == stored


def test_a_refused_tracking_server_is_one_line_soon(tmp_path):
    import socket
    import time

    from engine.errors import PhoenixError

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = build_db(f"sqlite:///{tmp_path / 'p.db'}")
    start = time.monotonic()
    with pytest.raises(PhoenixError, match=rf"^MLflow at http://u:\*\*\*@127\.0\.0\.1:{port}: "):
        export_run(store, 1, MlflowTarget(tracking_uri=f"http://u:pw@127.0.0.1:{port}", experiment="x"))
    assert time.monotonic() - start < 60  # MLflow's own retries took about four minutes
    assert "mlflow" not in store.get_run(1).config


def test_a_failed_export_ends_the_mlflow_run_it_created_and_a_deleted_one_is_replaced(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from engine.errors import PhoenixError

    store = build_db(f"sqlite:///{tmp_path / 'p.db'}")
    target = MlflowTarget(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="e")

    def broken(self, *args, **kwargs):
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(MlflowClient, "log_artifacts", broken)
        with pytest.raises(PhoenixError, match=r"^MLflow at sqlite:///.*: disk full$"):
            export_run(store, 1, target)
    client = _client(target)
    (orphan,) = client.search_runs([client.get_experiment_by_name("e").experiment_id])
    assert orphan.info.status == "FAILED"
    first = export_run(store, 1, target)
    client.delete_run(first["run_id"])
    again = export_run(store, 1, target)
    assert again["run_id"] != first["run_id"] and client.get_run(again["run_id"]).info.status == "FINISHED"


def test_one_store_spelled_two_ways_failed_tries_and_tags_that_differ_by_a_sign_stay_one_run_and_apart(
    tmp_path, monkeypatch
):
    """Round four: ``.../m.db`` and ``..././m.db`` gave two MLflow runs; two failed tries left two; the tags x:y,
    x;y and x@y arrived as one."""
    from mlflow.tracking import MlflowClient

    from engine.errors import PhoenixError

    store = build_db(f"sqlite:///{tmp_path / 'p.db'}")
    store.add_tags(1, ["x:y", "x;y", "x@y"])
    (tmp_path / "sub").mkdir()

    def broken(self, *args, **kwargs):
        raise OSError("read-only artifact store")

    with monkeypatch.context() as m:
        m.setattr(MlflowClient, "log_artifacts", broken)
        for _ in range(2):
            with pytest.raises(PhoenixError, match="read-only artifact store"):
                export_run(store, 1, MlflowTarget(tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", experiment="e"))
    done = export_run(store, 1, MlflowTarget(tracking_uri=f"sqlite:///{tmp_path}/sub/../m.db", experiment="e"))
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")
    (only,) = client.search_runs([client.get_experiment_by_name("e").experiment_id])
    assert only.info.run_id == done["run_id"] and only.info.status == "FINISHED"
    tag_keys = [k for k in only.data.tags if k.startswith("phoenix.tag.x_y")]
    assert len(tag_keys) == 3
