"""The client cross-check (engines crosscheck): Phoenix's load client against the field's own on one server and the
same requests, in turns; the verdict kept per client, vLLM's under the names runs have always kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import http_server, tiny_service


@pytest.fixture
def served(tiny_dirs, tmp_path):
    from db.migrate import ensure_schema
    from db.store import Store

    url = f"sqlite:///{tmp_path / 'c.db'}"
    ensure_schema(url)
    store = Store(url)
    service = tiny_service(tiny_dirs, store)
    # the tiny tokenizer has no chat template and both clients send chat: a plain one, as a chat model's would be
    service.decoder.pair.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    with http_server(service) as port:
        yield store, f"http://127.0.0.1:{port}", str(tiny_dirs["qwen3"]["target"])


@pytest.mark.subprocess
def test_each_client_gets_the_same_requests_each_first_in_turn_and_its_own_verdict(served, monkeypatch):
    from engine.engines import crosscheck as cc
    from engine.engines.config import CrossConfig

    store, url, _ = served
    seen: list[tuple[str, list[str]]] = []

    def fake(name: str, factor: float):
        def run(cfg, model, prompt_file: Path) -> dict:
            rows = [json.loads(line) for line in prompt_file.read_text().splitlines()]
            seen.append((name, [r["prompt"].split("\n", 1)[1] for r in rows]))
            return {"output_throughput": 100.0 * factor, "median_ttft_ms": 50.0 * factor}

        return run

    monkeypatch.setattr(cc, "CLIENTS", {"vllm": fake("vllm", 1.0), "guidellm": fake("guidellm", 3.0)})
    cfg = CrossConfig(url=url, engine="phoenix", limit=3, max_new_tokens=8, concurrency=2, rounds=3)
    cfg.clients = "vllm,guidellm"
    found = cc.crosscheck(store, cfg, say=lambda _line: None)
    assert [name for name, _ in seen] == ["vllm", "guidellm", "vllm", "guidellm", "guidellm", "vllm"]  # P, V, G first
    assert len({tuple(prompts) for _, prompts in seen}) == 1  # the same prompts, under each pass's own first line
    kept = store.get_run(found["runs"][0]).config["crosscheck"]
    assert len(kept["vllm_bench_serve"]) == len(kept["guidellm"]) == 3 and len(kept["phoenix"]) == 3
    tput = kept["output_throughput"]
    assert tput["vllm"] == 100.0 and tput["guidellm"] == 300.0 and tput["ratio"] == tput["vllm_ratio"]
    assert tput["guidellm_ratio"] == pytest.approx(tput["phoenix"] / 300.0)  # each client's ratio to Phoenix's own
    assert tput["guidellm_agree"] == (abs(tput["guidellm_ratio"] - 1) <= tput["tolerance"])


@pytest.mark.subprocess
@pytest.mark.skipif(
    not os.environ.get("PHOENIX_REQUIRE_VLLM") and not __import__("engine.engines.vllm").engines.vllm.installed(),
    reason="vLLM's client lives in the managed vLLM venv (python -m engine vllm install)",
)
def test_vllms_own_client_and_phoenixs_agree_on_the_same_server(served):
    from engine.engines.config import CrossConfig
    from engine.engines.crosscheck import crosscheck

    store, url, tokenizer = served
    cfg = CrossConfig(url=url, engine="phoenix", tokenizer=tokenizer, limit=4, max_new_tokens=16, concurrency=2)
    found = crosscheck(store, cfg, say=lambda _line: None)
    kept = store.get_run(found["runs"][0]).config["crosscheck"]
    assert [r["completed"] for r in kept["vllm_bench_serve"]] == [4, 4]
    assert kept["output_throughput"]["vllm"] > 0 and kept["median_ttft_ms"]["phoenix"] > 0
