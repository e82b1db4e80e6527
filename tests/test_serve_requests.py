"""The rest of a real request (issue 49): stop strings and token ids (never emitted, streamed or not, even inside an
accepted draft), seeds that replay a sampled request with speculation on or off, logprobs from the target's
distribution equal with speculation on and off, the usage chunk only when asked, chat content parts and the
developer role, max_completion_tokens, and vLLM's per-request metrics beside Phoenix's speculation object."""

from __future__ import annotations

import json

import pytest
from helpers import wait_for
from test_serve_api import PROMPTS, decoder, make_service, target_only  # noqa: F401  (decoder: a fixture)

from engine.engines.counters import per_request

REPEATS = PROMPTS[1]  # the n-gram and the near draft both get drafts accepted here


@pytest.fixture
def client(decoder, tmp_path):  # noqa: F811
    from fastapi.testclient import TestClient

    from engine.serve.api import make_app

    service, store = make_service(decoder, tmp_path, max_batch=4)
    with TestClient(make_app(service)) as c:
        yield c, service


def events(c, path: str, body: dict) -> list[dict]:
    with c.stream("POST", path, json=body | {"stream": True}) as r:
        assert r.status_code == 200, r.read()
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


def streamed_text(chunks: list[dict]) -> str:
    return "".join(ch["choices"][0].get("text", "") for ch in chunks if ch["choices"])


def test_a_stop_string_ends_the_output_before_it_streamed_or_not_even_inside_accepted_drafts(client, decoder):  # noqa: F811
    c, _ = client
    full = target_only(decoder, REPEATS, 40)
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop.strip(), full
    want = full[: full.index(stop)]
    body = {"prompt": REPEATS, "max_tokens": 40, "stop": [stop, "\x00never"], "speculation": {"k": 3}}
    whole = c.post("/v1/completions", json=body).json()
    choice = whole["choices"][0]
    assert choice["text"] == want and choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
    assert whole["speculation"]["accepted"] > 0  # passes kept drafts on the way to the stop
    chunks = events(c, "/v1/completions", body)
    assert streamed_text(chunks) == want and stop not in streamed_text(chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    kept = c.post("/v1/completions", json=body | {"include_stop_str_in_output": True}).json()
    assert kept["choices"][0]["text"] == want + stop
    # the stop's token ended decoding: no token past the one that completed it was generated
    n_ids = len(decoder.pair.tokenizer(REPEATS, add_special_tokens=False)["input_ids"])
    assert whole["usage"]["completion_tokens"] < 40 and whole["usage"]["prompt_tokens"] == n_ids


def test_a_stop_token_id_ends_the_output_with_stop(client, decoder):  # noqa: F811
    c, _ = client
    ids = decoder.pair.tokenizer(REPEATS, add_special_tokens=False)["input_ids"]
    ref = decoder.run(ids, 0, 30, timed=False).output_ids
    stop_id = ref[7]
    r = c.post("/v1/completions", json={"prompt": REPEATS, "max_tokens": 30, "stop_token_ids": [stop_id]}).json()
    assert r["choices"][0]["finish_reason"] == "stop" and r["choices"][0]["stop_reason"] == stop_id
    assert r["usage"]["completion_tokens"] == ref.index(stop_id) + 1


def test_a_seed_replays_a_sampled_request_with_speculation_on_or_off(client):
    c, _ = client
    body = {"prompt": PROMPTS[0], "max_tokens": 24, "temperature": 0.9, "top_p": 0.95, "seed": 1234}
    texts = {
        c.post("/v1/completions", json=body | extra).json()["choices"][0]["text"]
        for extra in ({}, {"speculation": {"drafter": "none"}}, {"speculation": {"k": 2}}, {"speculation": {"k": 6}})
    }
    assert len(texts) == 1
    other = {c.post("/v1/completions", json=body | {"seed": s}).json()["choices"][0]["text"] for s in range(6)}
    assert len(other) > 1  # the seed matters: sampling really samples


def test_logprobs_equal_with_speculation_on_and_off_in_both_shapes(client):
    c, _ = client
    body = {"prompt": REPEATS, "max_tokens": 16, "logprobs": 2, "speculation": {"k": 3}}
    on = c.post("/v1/completions", json=body).json()
    off = c.post("/v1/completions", json=body | {"speculation": {"drafter": "none"}}).json()
    assert on["speculation"]["accepted"] > 0 and off["speculation"]["proposed"] == 0
    lp_on, lp_off = on["choices"][0]["logprobs"], off["choices"][0]["logprobs"]
    assert lp_on["tokens"] == lp_off["tokens"] and len(lp_on["tokens"]) == 16
    assert "".join(lp_on["tokens"]) == on["choices"][0]["text"]
    assert lp_on["token_logprobs"] == pytest.approx(lp_off["token_logprobs"], abs=1e-4)
    # two ids may decode to one string, which the completions shape keys by: one or two entries
    assert all(1 <= len(t) <= 2 for t in lp_on["top_logprobs"]) and lp_on["text_offset"][0] == 0
    assert all(lp <= 0 for lp in lp_on["token_logprobs"])
    chat = c.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "logprobs": True, "top_logprobs": 3},
    ).json()
    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == 5 and all(len(e["top_logprobs"]) == 3 and "bytes" in e for e in content)
    chunks = events(c, "/v1/completions", body)
    streamed = [
        t
        for ch in chunks
        if ch["choices"] and ch["choices"][0]["logprobs"]
        for t in ch["choices"][0]["logprobs"]["tokens"]
    ]
    offsets = [  # a stream's text_offset counts from the start of the output, as the whole response's does
        o
        for ch in chunks
        if ch["choices"] and ch["choices"][0]["logprobs"]
        for o in ch["choices"][0]["logprobs"]["text_offset"]
    ]
    assert offsets == lp_on["text_offset"] and offsets[0] == 0
    assert streamed == lp_on["tokens"]


def test_the_usage_chunk_comes_only_when_asked_and_carries_vllms_metrics(client):
    c, _ = client
    plain = events(c, "/v1/completions", {"prompt": REPEATS, "max_tokens": 12})
    assert all(ch["choices"] for ch in plain)  # clients that read chunk.choices[0] never meet an empty one
    assert plain[-1]["metrics"]["speculative_decoding"]["num_draft_tokens"] == plain[-1]["speculation"]["proposed"]
    asked = events(
        c, "/v1/completions", {"prompt": REPEATS, "max_tokens": 12, "stream_options": {"include_usage": True}}
    )
    assert not asked[-1]["choices"] and asked[-1]["usage"]["completion_tokens"] == 12
    assert "metrics" in asked[-1] and all("usage" not in ch for ch in asked[:-1])


def test_vllms_per_request_metrics_agree_with_phoenixs_speculation_and_read_back(client):
    c, _ = client
    r = c.post("/v1/completions", json={"prompt": REPEATS, "max_tokens": 30, "speculation": {"k": 3}}).json()
    spec, m = r["speculation"], r["metrics"]
    sd = m["speculative_decoding"]
    assert sd["num_spec_tokens"] == 3 and len(sd["acceptance_histogram"]) == 4
    assert sd["num_draft_tokens"] == spec["proposed"] and sd["num_accepted_draft_tokens"] == spec["accepted"]
    assert sum(sd["acceptance_histogram"]) == sd["num_spec_steps"] == len(sd["per_step_drafted"])
    assert sd["mean_acceptance_length"] == pytest.approx(1 + spec["accepted"] / sd["num_spec_steps"])
    back = per_request(m)  # what Phoenix's own load client reads from vLLM, read from Phoenix
    assert back is not None and (back.proposed, back.accepted) == (spec["proposed"], spec["accepted"])
    assert [p.accepted for p in back.positions] == [p["accepted"] for p in spec["per_position"]]
    assert m["time_to_first_token_ms"] > 0 and m["generation_time_ms"] >= m["time_to_first_token_ms"]
    off = c.post("/v1/completions", json={"prompt": REPEATS, "max_tokens": 4, "speculation": {"drafter": "none"}})
    assert off.json()["metrics"]["speculative_decoding"] is None


def test_chat_content_parts_the_developer_role_and_max_completion_tokens(client):
    c, _ = client
    plain = c.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ab"}],
            "max_tokens": 8,
        },
    ).json()
    parts = c.post(
        "/v1/chat/completions",
        json={
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            ],
            "max_completion_tokens": 8,
        },
    ).json()
    assert parts["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    counts = ("prompt_tokens", "completion_tokens")  # the second is served from the prefix cache
    assert [parts["usage"][n] for n in counts] == [plain["usage"][n] for n in counts]
    assert parts["usage"]["completion_tokens"] <= 8
    bad = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})
    assert bad.status_code == 400 and "text parts" in bad.json()["error"]["message"]


def test_the_gauges_a_router_reads_and_vllms_latency_histograms(client, decoder):  # noqa: F811
    from engine.decode.scheduler import Scheduler
    from engine.decode.sequence import Request

    c, service = client
    for _ in range(3):
        c.post("/v1/completions", json={"prompt": REPEATS, "max_tokens": 6})
    wait_for(lambda: service.scheduler.load == (0, 0), 10, "the last row to leave the batch")
    text = c.get("/metrics").text
    values = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("phoenix:") and "{" in line
    }
    assert values["phoenix:num_requests_waiting"] == 0 and values["phoenix:num_requests_running"] == 0
    assert values["phoenix:kv_cache_usage_perc"] == 0
    for name in ("time_to_first_token_seconds", "request_time_per_output_token_seconds", "request_queue_time_seconds"):
        assert values[f"phoenix:{name}_count"] == 3, name
    # mid-decoding (a scheduler stepped by hand): rows hold their tokens, the rest wait
    sched = Scheduler(decoder.pair.target, decoder.row_drafter, decoder.eos_id, None, max_batch=2)
    ids = decoder.pair.tokenizer(REPEATS, add_special_tokens=False)["input_ids"]
    for j in range(3):
        sched.submit(Request(list(ids), 8, id=str(j)))
    sched.step()
    sched.step()
    assert sched.load == (2, 1) and sum(sched.held_by_row) >= 2 * len(ids)


def test_ignore_eos_decodes_to_the_budget_through_eos(decoder):  # noqa: F811
    from engine.decode.scheduler import Scheduler
    from engine.decode.sequence import Request

    ids = decoder.pair.tokenizer(REPEATS, add_special_tokens=False)["input_ids"]
    ref = decoder.run(ids, 0, 12, timed=False).output_ids
    eos = ref[4]  # a token the output holds, taken as EOS: decoding would end there
    sched = Scheduler(decoder.pair.target, decoder.row_drafter, eos, None, max_batch=2)
    done = {}
    for rid, ignore in (("stops", False), ("goes_on", True)):
        r = Request(list(ids), 12, "model", k=3, ignore_eos=ignore, id=rid)
        r.on_done = lambda f, rid=rid: done.__setitem__(rid, f)
        sched.submit(r)
    sched.drain()
    assert done["stops"].stats.output_ids == ref[: ref.index(eos) + 1] and done["stops"].reason == "stop"
    assert done["goes_on"].stats.output_ids == ref and done["goes_on"].reason == "length"
