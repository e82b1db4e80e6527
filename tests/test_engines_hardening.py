"""Findings of the adversarial rounds on the engines' commands (docs/reliability.md): each one line or handled."""

from __future__ import annotations

import json

import pytest

from engine.engines import llamacpp, process, vllm
from engine.engines.config import LoadConfig, SweepConfig
from engine.engines.load import variants_of
from engine.engines.record import stored
from engine.errors import PhoenixError

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("timeout", [-1.0, 0.0, float("nan"), 1e9])
def test_a_timeout_no_request_can_have_is_one_line_not_a_traceback(timeout, store):
    from engine.engines.record import sweep

    with pytest.raises(PhoenixError, match=r"^--timeout-s must be above 0"):
        variants_of(LoadConfig(timeout_s=timeout))
    with pytest.raises(PhoenixError, match=r"^--timeout-s must be above 0"):
        sweep(store, SweepConfig(model="m", timeout_s=timeout))


def test_a_password_in_a_servers_url_is_never_stored():
    kept = stored(LoadConfig(url="http://user:PASSWORD@127.0.0.1:8000/v1"))
    assert "PASSWORD" not in json.dumps(kept) and kept["url"] == "http://user:***@127.0.0.1:8000/v1"
    assert stored(SweepConfig(url="http://127.0.0.1:8000"))["url"] == "http://127.0.0.1:8000"


def test_the_load_sweep_takes_every_drafter_the_server_takes():
    assert variants_of(LoadConfig(variants="none,hybrid,hybrid-k4")) == ["none", "hybrid", "hybrid-k4"]


@pytest.mark.parametrize("body", ["[]", "{}", '{"config": []}', "not json", '{"config": {"port": "x", "bogus": 1}}'])
def test_a_server_record_that_is_not_phoenixs_breaks_no_stop_and_no_sweep(tmp_path, body):
    for kind in ("llamacpp", "vllm"):
        (tmp_path / f"{kind}-000000000000.json").write_text(body)
    assert llamacpp.stop_all(tmp_path) == [] and vllm.stop_all(tmp_path) == []
    assert process.command_at("http://127.0.0.1:8090", tmp_path) is None
    assert (tmp_path / "llamacpp-000000000000.json").read_text() == body  # not ours to delete
