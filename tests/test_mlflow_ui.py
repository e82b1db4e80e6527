"""An exported run opens in MLflow's own UI (`mlflow ui` from requirements-mlflow-ui.txt, in its own venv), in
Chromium: its name, note, tags, params, per-mode metrics and per-position steps."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import build_db
from test_browser import ARTIFACTS, CHROMIUM, ROOT, free_port

MLFLOW = os.environ.get("PHOENIX_MLFLOW_UI") or str(ROOT / ".venv-mlflow" / "bin" / "mlflow")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.extras,
    pytest.mark.skipif(
        (not os.path.exists(MLFLOW) or not shutil.which(CHROMIUM)) and not os.environ.get("PHOENIX_REQUIRE_MLFLOW_UI"),
        reason="MLflow's UI is not installed (.ci/run makes .venv-mlflow from "
        "requirements-mlflow-ui.txt) or chromium is missing",
    ),
]


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    from engine.export.mlflow import MlflowTarget, export_run

    folder = tmp_path_factory.mktemp("mlflow-ui")
    store = build_db(f"sqlite:///{folder / 'p.db'}")
    store.add_tags(1, ["baseline"])
    store.set_note(1, "why this run: the draft at k=4")
    target = MlflowTarget(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}", experiment="phoenix-ui")
    done = export_run(store, 1, target)
    port = free_port()
    proc = subprocess.Popen(
        [MLFLOW, "ui", "--backend-store-uri", target.tracking_uri, "--host", "127.0.0.1", "--port", str(port)],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            urllib.request.urlopen(base, timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    from mlflow.tracking import MlflowClient

    experiment = MlflowClient(tracking_uri=target.tracking_uri).get_experiment_by_name("phoenix-ui").experiment_id
    yield base, experiment, done["run_id"]
    proc.terminate()
    proc.wait(20)


def test_an_exported_run_opens_in_mlflows_own_ui_with_its_note_tags_params_and_metrics(ui):
    from playwright.sync_api import sync_playwright

    base, experiment, run_id = ui
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 2400})
        page.goto(f"{base}/#/experiments/{experiment}/runs/{run_id}")
        page.get_by_text("phoenix #1 run-0").first.wait_for(timeout=90000)
        page.wait_for_timeout(2000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(Path(ARTIFACTS) / "mlflow-run.png"), full_page=True)
        body = page.inner_text("body")
        browser.close()
    for text in (
        "why this run: the draft at k=4",
        "phoenix.tag.baseline",
        "bench.modes",
        "model_4/tokens_per_s",
        "model_4/k4/acceptance_per_position",
        "Finished",
    ):
        assert text in body, f"{text!r} is not on MLflow's run page"
