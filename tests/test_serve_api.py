"""Phoenix's OpenAI-compatible server: the official client works against it unchanged, streamed or not, every
output equals single-stream target-only, bad requests get their 4xx and lose nothing, and the live run is recorded."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest
from helpers import http_server, wait_for

from db.migrate import ensure_schema
from db.store import Store
from engine.decode.decoder import Decoder
from engine.decode.loading import load_pair
from engine.errors import PhoenixError
from engine.serve.config import ServeConfig, check_serve
from engine.serve.service import Service

PROMPTS = [
    'def add(a, b):\n    """Return a + b."""\n',
    "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(i)\n",
    "import os\n\nclass Config:\n    def __init__(self, path):\n        self.path = path\n",
]
TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"


@pytest.fixture(scope="module")
def decoder(tiny_dirs):
    d = tiny_dirs["qwen3"]
    dec = Decoder(load_pair(d["target"], d["near"], "cpu", "float32"))
    dec.pair.tokenizer.chat_template = TEMPLATE  # the tiny tokenizer has none; a chat model's would be used as is
    return dec


def make_service(decoder, tmp_path, **kw) -> tuple[Service, Store]:
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    ensure_schema(url)
    store = Store(url)
    cfg = check_serve(ServeConfig(device="cpu", dtype="float32", drafter="model", profile=False, **kw))
    return Service(cfg, decoder, store), store


@pytest.fixture
def client(decoder, tmp_path):
    from fastapi.testclient import TestClient

    from engine.serve.api import make_app

    service, store = make_service(decoder, tmp_path, max_batch=4)
    with TestClient(make_app(service)) as c:
        yield c, service, store


def target_only(decoder, prompt: str, n: int) -> str:
    ids = decoder.pair.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return decoder.text(decoder.run(ids, 0, n, timed=False))


@pytest.mark.subprocess
def test_the_openai_client_works_unchanged_streamed_or_not_and_every_output_equals_target_only(decoder, tmp_path):
    import openai

    service, store = make_service(decoder, tmp_path, max_batch=4)
    with http_server(service) as port:
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        assert [m.id for m in api.models.list().data] == [service.model_name]
        results: dict[int, str] = {}

        def one(i: int) -> None:  # concurrent requests share the batch
            r = api.completions.create(model=service.model_name, prompt=PROMPTS[i], max_tokens=20, temperature=0)
            results[i] = r.choices[0].text
            assert r.usage.completion_tokens == 20 or r.choices[0].finish_reason == "stop"

        workers = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        for i, prompt in enumerate(PROMPTS):
            assert results[i] == target_only(decoder, prompt, 20)
        chunks = list(api.completions.create(model=service.model_name, prompt=PROMPTS[1], max_tokens=20, stream=True))
        assert "".join(c.choices[0].text for c in chunks) == results[1]  # every chunk has a choice: none for usage
        chunks = list(
            api.completions.create(
                model=service.model_name,
                prompt=PROMPTS[1],
                max_tokens=20,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert "".join(c.choices[0].text for c in chunks if c.choices) == results[1]
        assert chunks[-1].usage.completion_tokens == 20 and not chunks[-1].choices  # usage in the last chunk, asked
        # vLLM's continuous_usage_stats (GuideLLM asks for it): every chunk carries the usage so far
        every = list(
            api.completions.create(
                model=service.model_name,
                prompt=PROMPTS[1],
                max_tokens=20,
                stream=True,
                stream_options={"include_usage": True, "continuous_usage_stats": True},  # type: ignore[typeddict-unknown-key]
            )
        )
        so_far = [c.usage.completion_tokens for c in every]
        assert so_far == sorted(so_far) and so_far[-1] == 20 and 0 < so_far[0] <= so_far[-1]
        assert "".join(c.choices[0].text for c in every if c.choices) == results[1]
        chat = api.chat.completions.create(
            model=service.model_name, messages=[{"role": "user", "content": "def f(x):"}], max_tokens=12
        )
        streamed = api.chat.completions.create(
            model=service.model_name, messages=[{"role": "user", "content": "def f(x):"}], max_tokens=12, stream=True
        )
        assert (
            "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == chat.choices[0].message.content
        )
        sampled = [
            api.completions.create(
                model=service.model_name, prompt=PROMPTS[0], max_tokens=12, temperature=0.8, seed=11
            ).choices[0]
            for _ in range(2)
        ]
        assert sampled[0].text == sampled[1].text  # a seed replays the request
        full = results[1]
        stop = full[len(full) // 2 : len(full) // 2 + 2]
        cut = api.completions.create(
            model=service.model_name, prompt=PROMPTS[1], max_tokens=20, stop=[stop], logprobs=2, seed=3
        ).choices[0]
        assert cut.text == full[: full.index(stop)] and cut.finish_reason == "stop"
        assert cut.logprobs is not None and len(cut.logprobs.tokens) == len(cut.logprobs.token_logprobs) > 0
        chat_lp = api.chat.completions.create(
            model=service.model_name,
            messages=[{"role": "user", "content": "def f(x):"}],
            max_tokens=4,
            logprobs=True,
            top_logprobs=2,
        )
        assert chat_lp.choices[0].logprobs is not None and len(chat_lp.choices[0].logprobs.content) == 4
        with pytest.raises(openai.BadRequestError, match="top_p must be"):
            api.completions.create(model=service.model_name, prompt="x", max_tokens=4, top_p=1.5)
        with pytest.raises(openai.NotFoundError, match="does not exist here"):
            api.completions.create(model="gpt-4", prompt="x", max_tokens=4)
    run = store.get_run(service.run_id)
    assert run.status == "done"
    assert store.count_requests(run.id) == len(PROMPTS) + 9


def test_each_response_says_what_speculation_did_for_it(client, decoder):
    c, service, _ = client
    body = c.post("/v1/completions", json={"model": service.model_name, "prompt": PROMPTS[1], "max_tokens": 24}).json()
    spec = body["speculation"]
    assert body["choices"][0]["text"] == target_only(decoder, PROMPTS[1], 24)
    assert spec["drafter"] == "model" and spec["variant"] == "model-auto" and spec["passes"] > 0
    assert sum(spec["arms"].values()) == spec["passes"]
    assert spec["per_position"][0]["proposed"] <= spec["passes"]
    assert sum(p["accepted"] for p in spec["per_position"]) == spec["accepted"]
    for key in ("queue_s", "prefill_s", "draft_s", "verify_s", "ttft_s", "latency_s"):
        assert spec[key] is not None and spec[key] >= 0
    assert spec["latency_s"] >= spec["prefill_s"] + spec["verify_s"]
    off = c.post(
        "/v1/completions",
        json={"prompt": PROMPTS[1], "max_tokens": 24, "speculation": {"drafter": "none"}},
    ).json()
    assert off["choices"][0]["text"] == body["choices"][0]["text"]
    assert off["speculation"]["variant"] == "none" and off["speculation"]["proposed"] == 0
    fixed = c.post("/v1/completions", json={"prompt": PROMPTS[1], "max_tokens": 24, "speculation": {"k": 3}}).json()
    assert set(fixed["speculation"]["arms"]) <= {"0", "1", "2", "3"} and fixed["speculation"]["variant"] == "model-k3"


BAD = [
    (b"{", 400, "not valid JSON"),
    (b"[1, 2]", 400, "must be a JSON object"),
    (json.dumps({"model": "other", "prompt": "x"}).encode(), 404, "does not exist here"),
    (json.dumps({"prompt": ""}).encode(), 400, "the prompt is empty"),
    (json.dumps({"prompt": "   "}).encode(), 400, "the prompt is empty"),
    (json.dumps({"prompt": "x " * 600, "max_tokens": 8}).encode(), 400, "exceed the model's context of 512"),
    (json.dumps({"prompt": "x", "max_tokens": 0}).encode(), 400, "max_tokens must be a whole number in 1..1024"),
    (json.dumps({"prompt": "x", "max_tokens": 5000}).encode(), 400, "max_tokens must be a whole number in 1..1024"),
    (json.dumps({"prompt": "x", "max_tokens": "9"}).encode(), 400, "max_tokens must be a whole number"),
    (json.dumps({"prompt": "x", "temperature": -0.5}).encode(), 400, "temperature must be a number in [0, 100]"),
    (json.dumps({"prompt": "x", "temperature": "0.7"}).encode(), 400, "temperature must be a number"),
    (json.dumps({"prompt": "x", "top_p": 0}).encode(), 400, "top_p must be a number in (0, 1]"),
    (json.dumps({"prompt": "x", "top_k": True}).encode(), 400, "top_k must be -1, 0 or a positive count"),
    (json.dumps({"prompt": "x", "min_p": 2}).encode(), 400, "min_p must be a number in [0, 1]"),
    (json.dumps({"prompt": "x", "seed": "7"}).encode(), 400, "seed must be a whole number"),
    (json.dumps({"prompt": "x", "n": 2}).encode(), 400, "n=2 is not supported"),
    (json.dumps({"prompt": "x", "presence_penalty": 0.5}).encode(), 400, "presence_penalty=0.5 is not supported"),
    (json.dumps({"prompt": "x", "stop": [""]}).encode(), 400, "stop must be a string or a list"),
    (json.dumps({"prompt": "x", "stop": ["a"] * 17}).encode(), 400, "stop must be a string or a list"),
    (json.dumps({"prompt": "x", "stop_token_ids": [99999]}).encode(), 400, "stop_token_ids must be a list"),
    (json.dumps({"prompt": "x", "logprobs": 21}).encode(), 400, "logprobs must be a whole number in 0..20"),
    (json.dumps({"prompt": "x", "logprobs": True}).encode(), 400, "logprobs must be a whole number"),
    (json.dumps({"prompt": "x", "stream_options": {"include_usage": True}}).encode(), 400, "only allowed with stream"),
    (
        json.dumps({"prompt": "x", "stream": True, "stream_options": {"include_usage": "yes"}}).encode(),
        400,
        "continuous_usage_stats must be true or false",
    ),
    (json.dumps({"prompt": "x", "include_stop_str_in_output": 1}).encode(), 400, "include_stop_str_in_output must"),
    (json.dumps({"prompt": "x", "speculation": {"k": 99}}).encode(), 400, "speculation.k must be in 0..8"),
    (json.dumps({"prompt": "x", "speculation": {"drafter": "eagle3"}}).encode(), 400, "needs an EAGLE-3 head"),
    (json.dumps({"prompt": [99999]}).encode(), 400, "token ids must be in"),
    (json.dumps({"prompt": {"a": 1}}).encode(), 400, "prompt must be a string"),
    # round five: booleans are no token ids (they once reached the prefill and stopped the server's loop)
    (json.dumps({"prompt": [True, False], "max_tokens": 2}).encode(), 400, "prompt must be a string"),
    (json.dumps({"prompt": "x", "stream": "false"}).encode(), 400, "stream must be true or false"),
    # fields accepted and then ignored; speculation keys that were taken as valid
    (json.dumps({"prompt": "x", "logit_bias": {"5": 10}}).encode(), 400, "logit_bias is not supported"),
    (json.dumps({"prompt": "x", "response_format": {"type": "json_object"}}).encode(), 400, "response_format is not"),
    (json.dumps({"prompt": "x", "tools": [{"type": "function"}]}).encode(), 400, "tools is not supported"),
    (json.dumps({"prompt": "x", "tool_choice": "required"}).encode(), 400, "tool_choice is not supported"),
    (json.dumps({"prompt": "x", "functions": [{"name": "f"}]}).encode(), 400, "functions is not supported"),
    (json.dumps({"prompt": "x", "speculation": {"K": 3}}).encode(), 400, "speculation takes drafter and k only"),
    (json.dumps({"prompt": "x", "speculation": {"kk": 2}}).encode(), 400, "speculation takes drafter and k only"),
    (json.dumps({"prompt": "x", "speculation": {"drafter": "none", "k": 3}}).encode(), 400, "drafts nothing"),
    (json.dumps({"prompt": "x", "speculation": {"drafter": 3}}).encode(), 400, "drafter must be a drafter's name"),
    # a lone surrogate (a 500 from the tokenizer), JSON nested 100,000 deep (a 500 with a 75-line log), 2 MB
    (b'{"prompt": "a\\ud800b"}', 400, "lone surrogate"),
    (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
    (json.dumps({"prompt": "x" * (2 << 20)}).encode(), 413, "at most 1048576 are read"),
]


def test_every_bad_request_gets_an_openai_error_and_one_log_line_and_the_server_goes_on(client, caplog):
    c, _, _ = client
    for body, status, words in BAD:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="phoenix.serve"):
            r = c.post("/v1/completions", content=body, headers={"content-type": "application/json"})
        assert r.status_code == status, (body[:80], r.text)
        err = r.json()["error"]
        assert words in err["message"] and err["type"] == "invalid_request_error", (body[:80], err)
        assert len([rec for rec in caplog.records if rec.name == "phoenix.serve"]) == 1, body[:80]
        assert c.post("/v1/completions", json={"prompt": "x", "max_tokens": 3}).status_code == 200


def test_bad_chat_requests_get_their_400(client):
    c, _, _ = client
    for messages, words in (
        ([], "non-empty list"),
        ([{"role": "robot", "content": "x"}], "needs a role"),
        ([{"role": "user", "content": ""}], "messages are empty"),
    ):
        r = c.post("/v1/chat/completions", json={"messages": messages})
        assert r.status_code == 400 and words in r.json()["error"]["message"]


def test_beyond_max_queue_the_answer_is_429_with_retry_after_and_nothing_is_held(decoder, tmp_path):
    from fastapi.testclient import TestClient

    from engine.serve.api import make_app

    service, _ = make_service(decoder, tmp_path, max_queue=1)
    service.scheduler.max_queue = 0  # a queue already full (a server start refuses --max-queue 0 itself)
    with TestClient(make_app(service)) as c:
        r = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 3})
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "queue_full"
        assert service.scheduler.load == (0, 0) and c.get("/health").json()["refused"] == 1


def test_a_client_that_goes_away_mid_stream_frees_its_row_and_the_row_is_recorded_as_cancelled(client):
    c, service, store = client
    with c.stream("POST", "/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 400, "stream": True}) as s:
        for line in s.iter_lines():
            if line.startswith("data: "):
                break
    wait_for(lambda: service.scheduler.load == (0, 0), 30, "the row to be freed")
    wait_for(lambda: store.count_requests(service.run_id) == 1, 30, "the cancelled request's row")
    (rec,) = store.requests(service.run_id)
    assert rec.error == "cancelled: the client went away" and 0 < rec.output_tokens < 400
    if rec.proposed:  # its drafts were verified: /metrics counts them as the record does (they were missing)
        text = c.get("/metrics").text
        drafted = [ln for ln in text.splitlines() if ln.startswith("phoenix:spec_decode_num_draft_tokens_total")]
        assert drafted and float(drafted[0].split()[-1]) >= rec.proposed, drafted


def test_the_live_run_keeps_every_request_its_steps_and_no_secret(decoder, tmp_path):
    from fastapi.testclient import TestClient

    from engine.serve.api import make_app

    service, store = make_service(decoder, tmp_path, api_key="s3cret-key", max_batch=2)
    with TestClient(make_app(service)) as c:
        assert c.post("/v1/completions", json={"prompt": "x", "max_tokens": 3}).status_code == 401
        auth = {"Authorization": "Bearer s3cret-key"}
        for p in PROMPTS:
            assert c.post("/v1/completions", json={"prompt": p, "max_tokens": 10}, headers=auth).status_code == 200
        assert c.get("/health").status_code == 200  # health and metrics stay open, as vLLM's do
        metrics = c.get("/metrics").text
    run = store.get_run(service.run_id)
    assert run.status == "done" and "s3cret" not in json.dumps(run.config)
    recs = store.requests(run.id)
    assert [r.mode for r in recs] == ["phoenix-model-auto_live"] * len(PROMPTS)
    assert all(r.queue_s is not None and r.batch_size >= 1 and r.ttft_s > 0 for r in recs)
    steps = store.serve_steps(run.id)
    assert sum(s.emitted for s in steps) == sum(r.output_tokens for r in recs) - len(recs)  # the prefill's token
    assert all(s.k is not None and s.estimate is not None for s in steps)
    drafted = sum(r.proposed for r in recs)
    assert (
        f'phoenix:spec_decode_num_draft_tokens_total{{engine="0",model_name="{service.model_name}"}} {drafted}.0'
        in metrics
    )


def test_another_address_needs_an_api_key():
    with pytest.raises(PhoenixError, match="--host 0.0.0.0 would serve other machines: pass --api-key"):
        check_serve(ServeConfig(host="0.0.0.0"))
    assert check_serve(ServeConfig(host="0.0.0.0", api_key="k")).api_key == "k"


def test_the_old_client_commands_say_where_they_moved(capsys):
    from engine.cli import main

    assert main(["serve", "sweep", "--url", "http://x"]) == 2
    assert "moved to `python -m engine engines sweep`" in capsys.readouterr().err


def test_an_unknown_path_or_method_is_an_openai_error_body_not_fastapis_detail(client):
    c, _, _ = client
    for r, status in ((c.get("/v1/nowhere"), 404), (c.get("/v1/completions"), 405)):
        assert r.status_code == status and "detail" not in r.json(), r.text
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and "/v1/" in err["message"]


@pytest.mark.parametrize(("flag", "value"), [("max_tokens_cap", 0), ("max_tokens_cap", -5)])
def test_a_server_that_would_refuse_every_request_does_not_start(flag, value):
    from engine.errors import PhoenixError
    from engine.serve.config import ServeConfig, check_serve

    with pytest.raises(PhoenixError, match=f"--{flag.replace('_', '-')} must be in 1"):
        check_serve(ServeConfig(**{flag: value}))


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("max_num_batched_tokens", 0, "--max-num-batched-tokens must be in 1"),
        ("long_prefill_token_threshold", 0, "--long-prefill-token-threshold must be in 1"),
        ("prefix_cache_gb", -1.0, "--prefix-cache-gb must be in 0..1024"),
        ("prefix_cache_gb", float("nan"), "--prefix-cache-gb must be in 0..1024"),
        ("pack", "fast", "--pack must be auto, on or off"),
        ("drafter", "magic", "--drafter must be auto, choice or one of"),
        ("max_queue", 0, "--max-queue must be in 1..100000"),
    ],
)
def test_serve_flags_out_of_range_are_one_line(flag, value, says):
    from engine.serve.config import ServeConfig, check_serve

    with pytest.raises(PhoenixError, match=says):
        check_serve(ServeConfig(**{flag: value}))


def test_top_k_one_is_greedy_and_served(client):
    c, _, _ = client
    r = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 3, "top_k": 1})
    assert r.status_code == 200, r.text


def test_a_whole_response_whose_client_went_away_stops_decoding_behind_the_api_key(decoder, tmp_path):
    """Not streamed, with --api-key: the disconnect is seen (an HTTP middleware once hid it, so the request
    decoded all its tokens for nobody and was recorded as finished)."""
    import socket
    import time

    service, store = make_service(decoder, tmp_path, api_key="k3y", max_tokens_cap=2000)
    real_step = service.scheduler.step

    def slow_step():  # the tiny model decodes 400 tokens in about a second: make it take several
        time.sleep(0.01)
        return real_step()

    service.scheduler.step = slow_step  # type: ignore[method-assign]
    with http_server(service) as port:
        body = json.dumps({"prompt": PROMPTS[0], "max_tokens": 400}).encode()
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k3y\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            wait_for(lambda: service.scheduler.load[0] == 1, 30, "the request to be decoding")
        wait_for(lambda: service.scheduler.load == (0, 0), 30, "the row to be freed")
    (rec,) = store.requests(service.run_id)
    assert rec.error == "cancelled: the client went away" and rec.output_tokens < 400


@pytest.mark.parametrize(
    "header,status",
    [
        ("Bearer s3cret", 200),
        ("bearer s3cret", 200),  # the scheme is case-insensitive (RFC 6750)
        ("BEARER  s3cret ", 200),
        ("Bearer s3cre", 401),
        ("Basic s3cret", 401),
        ("", 401),
    ],
)
def test_the_api_key_is_read_as_rfc_6750_says_and_compared_in_constant_time(decoder, tmp_path, header, status):
    from fastapi.testclient import TestClient

    from engine.serve.api import make_app

    service, _ = make_service(decoder, tmp_path, api_key="s3cret")
    with TestClient(make_app(service)) as c:
        r = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}, headers={"Authorization": header})
        assert r.status_code == status, r.text


def test_a_server_on_phoenixs_runner_warms_every_forward_shape_before_it_is_ready(tiny_dirs, tmp_path):
    from fastapi.testclient import TestClient

    from engine.decode.loading import prepare
    from engine.decode.runner import bucket
    from engine.serve.api import make_app

    d = tiny_dirs["qwen2"]
    dec = Decoder(prepare(load_pair(d["target"], d["near"], "cpu", "float32"), "off", "phoenix"))
    service, store = make_service(dec, tmp_path, max_num_batched_tokens=40)
    with TestClient(make_app(service)) as c:
        health = c.get("/health")
        assert health.status_code == 200
    # the draft by name, as a load run's spec keeps it: the folder's last part, never this machine's path
    assert health.json()["draft"] == Path(d["near"]).name and "/" not in health.json()["draft"]
    assert service.warmed == sorted({bucket(n) for n in range(1, 41)}) == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48]
    config = store.get_run(service.run_id).config
    assert config["warmed"] == service.warmed and set(config["startup_s"]) == {"warm", "profile"}
    assert config["runner"] == "phoenix"
