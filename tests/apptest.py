"""AppTest helpers the dashboard test files share: a recorded database, opening a page as a shared link would."""
from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from helpers import build_db


@pytest.fixture
def app_db(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'app.db'}"
    store = build_db(url)
    monkeypatch.setenv("PHOENIX_DB", url)
    monkeypatch.delenv("PHOENIX_SENTRY_WEB", raising=False)
    return store


def open_page(page: str, **params) -> AppTest:
    at = AppTest.from_file("../app/main.py", default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = str(value)
    at.run()  # a fresh session lands on the default page (Runs), as a shared link would
    if page != "runs":
        for key, value in params.items():
            at.query_params[key] = str(value)
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("vega_lite_chart")]


def chart_frames(at: AppTest, index: int):
    import pyarrow as pa

    el = at.get("vega_lite_chart")[index]
    return [pa.ipc.open_stream(ds.data.data).read_pandas() for ds in el.proto.datasets]
