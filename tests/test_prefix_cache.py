"""The prefix cache (engine.decode.prefix): prompts that begin alike reuse the KV of the first one's prefill,
exactly (a request served from the cache decodes what it decodes cold, fp32, with every drafter, the EAGLE-3
head's taps included), at least one prompt token is always computed, and entries leave least recently used first
past the memory budget."""

from __future__ import annotations

import pytest
import torch
from test_serve_batch import N, make_decoders, scheduler

from engine.decode.prefix import BLOCK, PrefixCache, block_hashes
from engine.decode.sequence import Request

SYSTEM = (
    "You are a careful Python programmer. Answer with code only, no prose, and keep every function short.\n"
    "Use type hints. Prefer the standard library. Name things plainly.\n"
)
QUESTIONS = ["def add(a, b):\n", "import os\n\nclass Config:\n", "for i in range(10):\n    print(i)\n", "x = [1, 2"]


@pytest.fixture(scope="module")
def decoders(tiny_dirs, tmp_path_factory):
    return make_decoders(tiny_dirs, tmp_path_factory)


def test_block_hashes_chain_their_prefix_and_cover_whole_blocks_only():
    a = list(range(40))
    b = list(range(16)) + [99] + list(range(17, 40))
    assert len(block_hashes(a)) == 40 // BLOCK
    assert block_hashes(a)[0] == block_hashes(b)[0] and block_hashes(a)[1] != block_hashes(b)[1]
    assert block_hashes(list(range(15))) == []


def test_a_hash_collision_never_serves_another_prompts_kv(monkeypatch):
    """CVE-2025-25183's attack on vLLM: two prefixes whose block hashes collide. The hash is SHA-256 of the tokens'
    bytes (no collision can be found), and even a forced collision is caught by the token check on a hit."""
    import hashlib

    import engine.decode.prefix as prefix

    planted, victim = [7] * 16 + [1], [8] * 16 + [1]
    assert block_hashes(planted)[0] == hashlib.sha256(b"".join(t.to_bytes(8, "little") for t in [7] * 16)).digest()
    assert block_hashes(planted) != block_hashes(victim)
    monkeypatch.setattr(prefix, "block_hashes", lambda ids, block=BLOCK, salt="": [b"same"] * (len(ids) // block))
    cache = PrefixCache(budget_bytes=1 << 20)
    cache.store(planted, *_kv(17, fill=66.0), None)
    assert cache.lookup(planted + [2], taps=False) is not None  # the planter's own prompt still hits
    assert cache.lookup(victim, taps=False) is None  # the colliding prompt computes its own KV


def _kv(length: int, fill: float = 1.0):
    return [torch.full((1, 2, length, 4), fill)], [torch.full((1, 2, length, 4), fill)]


def test_a_lookup_leaves_a_token_to_compute_needs_taps_where_asked_and_entries_leave_lru():
    ids = list(range(48))
    per_entry = 2 * (1 * 2 * 48 * 4 * 4)  # keys and values, fp32
    cache = PrefixCache(budget_bytes=2 * per_entry)
    cache.store(ids, *_kv(48), None)
    hit = cache.lookup(ids, taps=False)
    assert hit is not None and hit[1] == 32  # 48 would leave nothing to compute: the deepest block short of it
    assert cache.lookup(ids + [7], taps=False)[1] == 48
    assert cache.lookup(ids + [7], taps=True) is None  # stored without taps: no use to a head
    other, third = [1000 + i for i in range(48)], [2000 + i for i in range(48)]
    cache.store(other, *_kv(48), None)
    cache.lookup(ids + [7], taps=False)  # ids is now the most recently used
    cache.store(third, *_kv(48), None)  # over budget: the least recently used (other) leaves
    assert cache.lookup(other + [1], taps=False) is None and cache.lookup(ids + [1], taps=False) is not None
    assert cache.stats.evicted == 1 and cache.used <= cache.budget_bytes


@pytest.mark.parametrize("drafter,k", [("none", None), ("model", 3), ("ngram", 4), ("eagle3", 2), ("hybrid", 4)])
def test_requests_served_from_the_cache_decode_what_they_decode_cold(decoders, drafter, k):
    dec = decoders[drafter]
    prompts = [dec.encode(SYSTEM + q) for q in QUESTIONS]
    assert len(prompts[0]) > 2 * BLOCK
    cold = [dec.run(ids, 0, N, timed=False).output_ids for ids in prompts]
    sched = scheduler(dec, None, max_batch=2, prefix=PrefixCache(64 * 2**20))
    done = {}
    for round_ in range(2):  # the second round sends every prompt again: whole prompts from the cache
        for i, ids in enumerate(prompts):
            r = Request(ids, N, drafter, k=k, id=f"{round_}-{i}")
            r.on_done = lambda f: done.__setitem__(f.request.id, f)
            sched.submit(r)
        sched.drain()
    for round_ in range(2):
        for i in range(len(prompts)):
            assert done[f"{round_}-{i}"].stats.output_ids == cold[i], f"{drafter} round {round_} prompt {i}"
    assert done["0-0"].stats.cached_tokens == 0
    assert all(done[f"0-{i}"].stats.cached_tokens >= BLOCK for i in (2, 3))  # the shared system prompt
    assert all(done[f"1-{i}"].stats.cached_tokens == (len(p) - 1) // BLOCK * BLOCK for i, p in enumerate(prompts))
    assert sched.prefix.stats.hits >= 6


def test_the_server_reports_cached_prompt_tokens_in_its_usage(decoders):
    from engine.serve.render import usage

    dec = decoders["none"]
    ids = dec.encode(SYSTEM + QUESTIONS[0])
    sched = scheduler(dec, None, prefix=PrefixCache(64 * 2**20))
    got = []
    for _ in range(2):
        r = Request(ids, 4)
        r.on_done = got.append
        sched.submit(r)
        sched.drain()
    assert usage(got[0])["prompt_tokens_details"] == {"cached_tokens": 0}
    assert usage(got[1])["prompt_tokens_details"]["cached_tokens"] == (len(ids) - 1) // BLOCK * BLOCK
    assert got[1].stats.output_ids == got[0].stats.output_ids


def test_a_served_run_keeps_each_requests_cached_tokens_and_the_dashboard_reads_its_hit_rate(tiny_dirs, tmp_path):
    """The dashboard shows a served run's hit rate and the TTFT it saved (engine.analysis.prefix), from each
    request's row (requests.cached_tokens, 0027)."""
    from fastapi.testclient import TestClient
    from test_serve_api import TEMPLATE, make_service

    from engine.analysis.prefix import summary
    from engine.decode.decoder import Decoder
    from engine.decode.loading import load_pair
    from engine.serve.api import make_app

    d = tiny_dirs["qwen3"]
    dec = Decoder(load_pair(d["target"], d["near"], "cpu", "float32"))
    dec.pair.tokenizer.chat_template = TEMPLATE
    service, store = make_service(dec, tmp_path, max_batch=2)
    with TestClient(make_app(service)) as c:
        for q in QUESTIONS[:3]:
            body = {
                "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
                "max_tokens": 4,
            }
            assert c.post("/v1/chat/completions", json=body).status_code == 200
    rows = store.prefix_rows(service.run_id)
    assert [r[0] == 0 for r in rows] == [True, False, False]  # the first one filled the cache, the next hit it
    p = summary(rows)
    assert p is not None and p.requests == 3 and p.hits == 2 and 0 < p.token_share < 1
    assert p.ttft_hit_s is not None and p.ttft_miss_s is not None and p.ttft_ratio is not None
    assert summary([(None, 10, 0.1)]) is None  # rows from before 0027, or without a cache: nothing to show
