"""How a load level spends its time: blocks of prompts, each run by every variant in turn with the order rotating,
so the machine's drift falls on all variants alike; and the llama-servers a llama.cpp sweep manages."""

from __future__ import annotations

import pytest

from engine.engines import load
from engine.engines.load import LoadConfig, level, managed, variants_of
from engine.errors import PhoenixError
from engine.prompts.sets import Prompt

pytestmark = pytest.mark.fast

PROMPTS = [Prompt(id=f"p{i}", text=f"prompt {i}") for i in range(5)]


def _record_calls(monkeypatch) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []

    def fake(url, model, prompt, max_tokens, chat, spec, timeout_s, abort=None):
        calls.append((url if spec is None else str(spec), prompt))
        return {"text": prompt.upper(), "ttft_s": 0.01, "usage": {}, "speculation": None, "timings": None,
                "error": None, "latency_s": 0.02}  # fmt: skip

    monkeypatch.setattr(load, "stream_one", fake)
    return calls


def test_at_concurrency_1_every_prompt_runs_through_every_variant_before_the_next_and_the_order_rotates(monkeypatch):
    calls = _record_calls(monkeypatch)
    blocks: list[dict] = []
    walls = level(LoadConfig(), "m", PROMPTS[:3], 1, ["none", "k3"], {"none": "u", "k3": "u"}, blocks.append)
    none, k3 = str({"drafter": "none"}), str({"k": 3})
    assert calls == [
        (none, "prompt 0"), (k3, "prompt 0"),
        (k3, "prompt 1"), (none, "prompt 1"),
        (none, "prompt 2"), (k3, "prompt 2"),
    ]  # fmt: skip
    assert [[p.id for p, _ in b["k3"]] for b in blocks] == [["p0"], ["p1"], ["p2"]]  # each block kept as it ends
    assert walls["none"] > 0 and walls["k3"] > 0


def test_a_block_never_holds_fewer_prompts_than_the_level_runs_at_once(monkeypatch):
    calls = _record_calls(monkeypatch)
    cfg = LoadConfig(engine="llamacpp", spec_types="none,ngram-mod", block=1)  # served as-is: calls name the url
    level(cfg, "m", PROMPTS, 2, ["a", "b"], {"a": "ua", "b": "ub"}, lambda got: None)
    urls = [u for u, _ in calls]
    # blocks of 2, 2 and 1 prompts: a a b b, then b b a a, then a b
    assert urls == ["ua", "ua", "ub", "ub", "ub", "ub", "ua", "ua", "ua", "ub"]


def test_llama_cpp_sweeps_start_one_server_per_type_with_a_slot_per_request_of_the_top_level():
    cfg = LoadConfig(engine="llamacpp", spec_types="none,ngram-mod", concurrency="1,4,16", port=9000)
    servers = managed(cfg)
    assert [(s.spec_type, s.port, s.parallel, s.ctx) for s in servers] == [
        ("none", 9000, 16, 16384),
        ("ngram-mod", 9001, 16, 16384),
    ]
    assert variants_of(cfg) == ["none", "ngram-mod"]


def test_a_llama_cpp_load_sweep_drafts_with_phoenixs_exported_head_under_its_variants_settings(tmp_path):
    head = tmp_path / "head.gguf"
    head.write_bytes(b"GGUF")  # a .gguf path is taken as it is; named heads are exported on first use
    cfg = LoadConfig(engine="llamacpp", spec_types="none,draft-eagle3-k2", concurrency="1,4", head=str(head))
    servers = managed(cfg)
    assert (servers[1].spec_type, servers[1].draft_max, servers[1].draft_model) == ("draft-eagle3", 2, str(head))
    assert variants_of(cfg) == ["none", "draft-eagle3-k2"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"spec_types": "none,ngram-mod"}, "^--spec-types starts llama-servers: it needs --engine llamacpp$"),
        ({"engine": "llamacpp", "spec_types": "ngram-mod,none"}, "^--spec-types must start with none"),
        ({"engine": "llamacpp", "spec_types": "none,none"}, "name each variant once$"),
        ({"engine": "llamacpp", "spec_types": "none,draft-eagle3-x"}, "^--spec-types: unknown 'draft-eagle3-x'; use"),
        ({"block": -1}, r"^--block must be 0 or more, got -1$"),
    ],
)
def test_a_bad_sweep_setting_is_one_line(fields, message):
    with pytest.raises(PhoenixError, match=message):
        variants_of(LoadConfig(**fields))


@pytest.mark.parametrize(
    ("variant", "spec"),
    [
        ("none", {"drafter": "none"}),
        ("auto", {}),
        ("k3", {"k": 3}),
        ("ngram", {"drafter": "ngram"}),
        ("suffix-k4", {"drafter": "suffix", "k": 4}),
        ("as-served", None),
    ],
)
def test_a_variant_names_the_speculation_each_request_asks_for(variant, spec):
    assert load.speculation(variant) == spec


def test_an_unknown_variant_is_one_line_before_anything_is_sent():
    with pytest.raises(PhoenixError, match=r"^--variants: unknown 'ngram-3'; use none, auto, k<N>, <drafter>"):
        variants_of(LoadConfig(variants="none,ngram-3"))


def test_a_sweep_stopped_mid_block_keeps_every_answered_request_and_ends_interrupted(tmp_path, monkeypatch):
    from helpers import migrated

    from db.store import Store
    from engine.prompts import sets

    store = Store(migrated(f"sqlite:///{tmp_path / 'cut.db'}"))
    sent: list[str] = []

    def fake(url, model, prompt, max_tokens, chat, spec, timeout_s, abort=None):
        sent.append(prompt)
        if len(sent) == 4:  # the second block's second variant: Ctrl-C arrives
            raise KeyboardInterrupt
        return {"text": "same", "ttft_s": 0.01, "usage": {"completion_tokens": 3}, "speculation": None,
                "timings": None, "error": None, "latency_s": 0.02}  # fmt: skip

    monkeypatch.setattr(load, "stream_one", fake)
    monkeypatch.setattr(sets, "load", lambda name, limit: PROMPTS[:3])
    monkeypatch.setattr(load, "load_prompts", lambda name, limit: PROMPTS[:3])
    cfg = LoadConfig(model="m", concurrency="1", variants="none,k3", warmup=False)
    with pytest.raises(KeyboardInterrupt):
        load.sweep(store, cfg, say=lambda _: None)
    (run,) = store.list_runs()
    assert run.status == "interrupted"
    recs = store.requests(run.id)
    # block 1 whole (none, k3), block 2's first answer (k3 ran first there); the interrupted request is not a row
    assert [(r.mode, r.prompt_id) for r in recs] == [("phoenix-none_c1", "p0"), ("phoenix-k3_c1", "p0"),
                                                     ("phoenix-k3_c1", "p1")]  # fmt: skip
    assert recs[1].identical is True and recs[2].identical is None  # p1's reference never answered
