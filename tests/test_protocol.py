"""The model-server protocol an inference gateway's endpoint picker reads (kubernetes-sigs/gateway-api-inference-
extension, docs/proposals/003-model-server-protocol): every series it names, with its type and meaning, read through
Prometheus's own text parser, while requests really wait and run; and readiness apart from liveness."""

from __future__ import annotations

import math
import threading
import time

import pytest
from helpers import wait_for
from prometheus_client.parser import text_string_to_metric_families
from test_serve_api import PROMPTS, decoder, make_service  # noqa: F401  (decoder: a fixture)

from engine.observe.prometheus import BLOCK_SIZE

# name -> (type, the labels it must carry)
PROTOCOL = {
    "vllm:num_requests_waiting": ("gauge", {"model_name"}),
    "vllm:num_requests_running": ("gauge", {"model_name"}),
    "vllm:kv_cache_usage_perc": ("gauge", {"model_name"}),
    "vllm:lora_requests_info": ("gauge", {"max_lora", "running_lora_adapters", "waiting_lora_adapters"}),
    "vllm:cache_config_info": ("gauge", {"block_size", "num_gpu_blocks"}),
}


def scrape(client) -> dict:
    """name -> (type, [(labels, value)]) as Prometheus's parser reads the exposition."""
    text = client.get("/metrics").text
    return {f.name: (f.type, [(s.labels, s.value) for s in f.samples]) for f in text_string_to_metric_families(text)}


@pytest.fixture
def slow_server(decoder, tmp_path):  # noqa: F811
    """Phoenix's server with the protocol's names, its steps slowed so requests are seen waiting and running."""
    from fastapi.testclient import TestClient

    from engine.serve.api import make_app

    service, _ = make_service(decoder, tmp_path, max_batch=2, metrics_prefix="vllm", max_tokens_cap=2000)
    real = service.scheduler.step

    def slow_step():
        time.sleep(0.02)
        return real()

    service.scheduler.step = slow_step  # type: ignore[method-assign]
    with TestClient(make_app(service)) as client:
        yield client, service


def test_every_series_the_protocol_names_has_its_type_labels_and_meaning_while_requests_wait_and_run(slow_server):
    client, service = slow_server
    idle = scrape(client)
    for name, (kind, labels) in PROTOCOL.items():
        assert name in idle, f"{name} missing"
        assert idle[name][0] == kind and idle[name][1], f"{name}: {idle[name]}"
        assert labels <= set(idle[name][1][0][0]), f"{name} lacks labels {labels - set(idle[name][1][0][0])}"
    value = {name: idle[name][1][0][1] for name in PROTOCOL}
    assert value["vllm:num_requests_waiting"] == value["vllm:num_requests_running"] == 0
    assert value["vllm:kv_cache_usage_perc"] == 0
    cache = idle["vllm:cache_config_info"][1][0][0]
    assert int(cache["block_size"]) == BLOCK_SIZE and int(cache["num_gpu_blocks"]) == service.kv_blocks > 0
    lora_labels, lora_value = idle["vllm:lora_requests_info"][1][0]
    assert lora_labels["max_lora"] == "0" and lora_labels["running_lora_adapters"] == ""
    assert abs(lora_value - time.time()) < 60  # the protocol's value is the sample's timestamp

    long = [{"prompt": p, "max_tokens": 300, "ignore_eos": True} for p in PROMPTS * 2]
    threads = [threading.Thread(target=client.post, args=("/v1/completions",), kwargs={"json": b}) for b in long]
    for t in threads:
        t.start()
    wait_for(lambda: service.scheduler.load == (2, 4), 30, "two running and four waiting")
    busy = scrape(client)
    running, waiting = (busy[f"vllm:num_requests_{k}"][1][0][1] for k in ("running", "waiting"))
    rows = service.scheduler.held_by_row
    assert (running, waiting) == service.scheduler.load == (2, 4)
    usage = busy["vllm:kv_cache_usage_perc"][1][0][1]
    # a fraction of blocks: the admitted rows' tokens in whole blocks, over the blocks the loop holds for its rows
    assert 0 < usage <= 1 and math.isclose(
        usage, sum(-(-n // BLOCK_SIZE) for n in rows) / service.kv_blocks, rel_tol=0.5
    )
    del service.scheduler.step  # the slowed step was for watching them wait: the rest run at speed (21 s to 2 s)
    for t in threads:
        t.join(120)
    assert scrape(client)["vllm:num_requests_running"][1][0][1] == 0


def test_readiness_is_apart_from_liveness(slow_server):
    client, service = slow_server
    assert client.get("/ready").status_code == 200 and client.get("/live").status_code == 200
    service.request_stop()  # SIGTERM's first step: draining
    assert client.get("/ready").status_code == 503 and "draining" in client.get("/ready").json()["error"]["message"]
    assert client.get("/live").status_code == 200  # alive: a router takes it out, nothing restarts it


def test_the_default_names_stay_phoenixs_and_a_bad_prefix_is_one_line():
    from engine.errors import PhoenixError
    from engine.serve.config import ServeConfig, check_serve

    assert ServeConfig().metrics_prefix == "phoenix"
    with pytest.raises(PhoenixError, match="--metrics-prefix must be phoenix or vllm"):
        check_serve(ServeConfig(metrics_prefix="sglang"))
