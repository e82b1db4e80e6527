"""AppTest helpers the dashboard test files share: a recorded database, opening a page as a shared link would."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest


def open_page(page: str, as_link: bool = False, **params) -> AppTest:
    """The page rendered once with ``params`` in its URL. ``as_link`` renders it as a shared link arrives: a
    fresh session lands on the default page (Runs) first, then moves to the page with the link's parameters."""
    at = AppTest.from_file("../app/main.py", default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = str(value)
    # AppTest finds a page by its file before the first run only where the file's name is its url_path; New run
    # (views/new_run.py at /new) is reached through the landing page, as a person reaches it
    if as_link or page in ("runs", "new_run"):
        at.run()
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
