"""How a load level spends its time: blocks of prompts, each run by every variant in turn with the order rotating,
so the machine's drift falls on all variants alike; and the llama-servers a llama.cpp sweep manages."""

from __future__ import annotations

import pytest

from engine.engines import load
from engine.engines.config import LoadConfig
from engine.engines.load import Level, level, servers_of, variants_of
from engine.errors import PhoenixError
from engine.prompts.sets import Prompt

pytestmark = pytest.mark.fast

PROMPTS = [Prompt(id=f"p{i}", text=f"prompt {i}") for i in range(5)]


def _record_calls(monkeypatch) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []

    def fake(url, model, prompt, max_tokens, chat, spec, timeout_s, abort=None, extra=None):
        calls.append((url if spec is None else str(spec), prompt))
        return {"text": prompt.upper(), "ttft_s": 0.01, "usage": {}, "speculation": None, "timings": None,
                "error": None, "latency_s": 0.02}  # fmt: skip

    monkeypatch.setattr(load, "stream_one", fake)
    return calls


def test_at_concurrency_1_every_prompt_runs_through_every_variant_before_the_next_and_the_order_rotates(monkeypatch):
    calls = _record_calls(monkeypatch)
    blocks: list[dict] = []
    walls, per_block = level(
        LoadConfig(), "m", PROMPTS[:3], Level(1), ["none", "k3"], {"none": "u", "k3": "u"}, blocks.append
    )
    none, k3 = str({"drafter": "none"}), str({"k": 3})
    assert calls == [
        (none, "prompt 0"), (k3, "prompt 0"),
        (k3, "prompt 1"), (none, "prompt 1"),
        (none, "prompt 2"), (k3, "prompt 2"),
    ]  # fmt: skip
    assert [[p.id for p, _ in b["k3"]] for b in blocks] == [["p0"], ["p1"], ["p2"]]  # each block kept as it ends
    assert walls["none"] > 0 and walls["k3"] > 0
    # each block's wall and output tokens per variant, paired: what gives a ratio between settings its interval
    assert [len(per_block[v]) for v in ("none", "k3")] == [3, 3]
    assert sum(b[0] for b in per_block["k3"]) == pytest.approx(walls["k3"], abs=1e-3)
    assert all(b[2] is None for b in per_block["k3"])  # no CPU reader given: no cost, never a made-up one


def test_a_block_never_holds_fewer_prompts_than_the_level_runs_at_once(monkeypatch):
    calls = _record_calls(monkeypatch)
    cfg = LoadConfig(engine="llamacpp", spec_types="none,ngram-mod", block=1)  # served as-is: calls name the url
    level(cfg, "m", PROMPTS, Level(2), ["a", "b"], {"a": "ua", "b": "ub"}, lambda got: None)
    urls = [u for u, _ in calls]
    # blocks of 2, 2 and 1 prompts: a a b b, then b b a a, then a b
    assert urls == ["ua", "ua", "ub", "ub", "ub", "ub", "ua", "ua", "ua", "ub"]


def test_llama_cpp_sweeps_start_one_server_per_type_with_a_slot_per_request_of_the_top_level():
    cfg = LoadConfig(engine="llamacpp", spec_types="none,ngram-mod", concurrency="1,4,16", port=9000)
    servers = servers_of(cfg)
    assert [(s.config.spec_type, s.config.port, s.config.parallel, s.config.ctx) for s in servers] == [
        ("none", 9000, 16, 16384),
        ("ngram-mod", 9001, 16, 16384),
    ]
    assert variants_of(cfg) == ["none", "ngram-mod"]


def test_a_llama_cpp_load_sweep_drafts_with_phoenixs_exported_head_under_its_variants_settings(tmp_path):
    head = tmp_path / "head.gguf"
    head.write_bytes(b"GGUF")  # a .gguf path is taken as it is; named heads are exported on first use
    cfg = LoadConfig(engine="llamacpp", spec_types="none,draft-eagle3-k2", concurrency="1,4", head=str(head))
    servers = servers_of(cfg)
    c = servers[1].config
    assert (c.spec_type, c.draft_max, c.draft_model) == ("draft-eagle3", 2, str(head))
    assert variants_of(cfg) == ["none", "draft-eagle3-k2"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"spec_types": "none,ngram-mod"}, "^--spec-types starts servers: it needs --engine llamacpp or vllm$"),
        ({"engine": "llamacpp", "spec_types": "ngram-mod,none"}, "^--spec-types must start with none"),
        ({"engine": "llamacpp", "spec_types": "none,none"}, "names a variant twice: none,none$"),
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

    def fake(url, model, prompt, max_tokens, chat, spec, timeout_s, abort=None, extra=None):
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


def answer_or_429(prompt: str, refused: tuple[str, ...]) -> dict:
    """A load client's answer: five tokens, or the 429 a full queue answers for the prompts in ``refused``."""
    if prompt in refused:
        return {"text": "", "ttft_s": None, "usage": {}, "speculation": None, "timings": None,
                "error": "HTTP 429: the queue is full", "latency_s": 0.001}  # fmt: skip
    return {"text": "x", "ttft_s": 0.01, "usage": {"completion_tokens": 5}, "speculation": None,
            "timings": None, "error": None, "latency_s": 0.05}  # fmt: skip


def test_a_rate_level_sends_at_poisson_arrival_times_capped_and_records_vllm_bench_serves_figures(
    tmp_path, monkeypatch
):
    """Arrivals at a request rate: the requests leave at their seeded gamma times, at most --max-concurrency in
    flight; a 429 is a failed row, counted as such in the level's figures and never averaged in as 0 tok/s."""
    import time

    from helpers import migrated

    from db.store import Store
    from engine.engines.arrivals import arrival_times

    store = Store(migrated(f"sqlite:///{tmp_path / 'rate.db'}"))
    sent: list[float] = []
    t0 = time.perf_counter()

    def fake(url, model, prompt, max_tokens, chat, spec, timeout_s, abort=None, extra=None):
        sent.append(time.perf_counter() - t0)
        return answer_or_429(prompt, refused=("prompt 3",))

    monkeypatch.setattr(load, "stream_one", fake)
    monkeypatch.setattr(load, "load_prompts", lambda name, limit: PROMPTS)
    cfg = LoadConfig(model="m", request_rate="20,inf", max_concurrency=2, variants="none", warmup=False)
    cfg.goodput = "ttft:100"
    first, second = load.sweep(store, cfg, say=lambda _: None)
    expected = arrival_times(5, 20.0, 1.0, 0)
    assert all(s >= e - 0.005 for s, e in zip(sent[:5], expected))  # none leaves before its arrival time
    runs = {r.id: r for r in store.list_runs()}
    assert runs[first].name.endswith("rate=20 cap=2") and runs[second].name.endswith("rate=inf cap=2")
    f = runs[first].config["figures"]["none"]
    assert (f["requests"], f["answered"], f["failed"]) == (5, 4, 1) and f["good_requests"] == 4
    assert f["output_throughput"] == pytest.approx(20 / f["wall_s"])
    assert runs[first].config["request_rate"] == 20.0 and runs[second].config["request_rate"] == "inf"
    assert {r.mode for r in store.requests(first)} == {"phoenix-none_c2"}


def test_a_concurrency_level_against_a_refusing_server_counts_refusals_as_failures_not_zero_tok_s(
    tmp_path, monkeypatch
):
    """At concurrency 16 against a 429-ing server, the sweep once averaged the refused requests' 0 tok/s into its
    table and still said n = 16 (issue 50): refusals are failed rows, n counts what was answered, and no figure
    takes a refused request in."""
    from helpers import migrated

    from db.store import Store
    from engine.analysis.load import level_table

    store = Store(migrated(f"sqlite:///{tmp_path / 'refused.db'}"))

    def fake(url, model, prompt, max_tokens, chat, spec, timeout_s, abort=None, extra=None):
        return answer_or_429(prompt, refused=("prompt 1", "prompt 3"))

    monkeypatch.setattr(load, "stream_one", fake)
    monkeypatch.setattr(load, "load_prompts", lambda name, limit: PROMPTS)
    (run_id,) = load.sweep(store, LoadConfig(model="m", concurrency="4", variants="none", warmup=False), say=print)
    run = store.get_run(run_id)
    f = run.config["figures"]["none"]
    assert (f["requests"], f["answered"], f["failed"]) == (5, 3, 2)
    assert f["output_throughput"] == pytest.approx(15 / f["wall_s"])  # only answered tokens, over the wall time
    (row,) = level_table(store.served_requests(run_id), run.config.get("wall_s")).to_dict("records")
    assert row["n"] == 3 and row["failed"] == 2 and row["latency_p50_s"] == pytest.approx(0.05)
    assert run.status == "done"  # some answered: the level stands, with its failures counted


def test_a_managed_server_that_died_after_start_is_named_with_its_logs_reason(tmp_path):
    """llama.cpp's draft-eagle3 on a qwen2 target aborts on its first request (its qwen2 graph exposes no layer
    inputs): the sweep must say so in one line before it runs a level, not record 8 connection errors per level."""
    import http.server
    import threading

    from engine.engines import managed
    from engine.engines.llamacpp import LlamaCppConfig

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    alive = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=alive.serve_forever, daemon=True).start()
    dead = http.server.HTTPServer(("127.0.0.1", 0), Health)
    dead_port = dead.server_address[1]
    dead.server_close()  # nothing answers there now
    log = tmp_path / "llamacpp.log"
    log.write_text(
        "I srv llama_server: listening\n"
        'src/llama-graph.cpp:1384: GGML_ASSERT(t_layer_inp[il] != nullptr && "layer input tensor is null") failed\n'
        "#2 ggml_abort ()\n"
    )
    servers = [
        managed.Server("none", LlamaCppConfig()),
        managed.Server("draft-eagle3-k3", LlamaCppConfig(spec_type="draft-eagle3")),
    ]
    infos = [
        {"url": f"http://127.0.0.1:{alive.server_address[1]}", "log": str(tmp_path / "other.log")},
        {"url": f"http://127.0.0.1:{dead_port}", "log": str(log)},
    ]
    try:
        gone = managed.died(servers, infos)
        assert managed.died(servers[:1], infos[:1]) == []  # a server that answers is no line
    finally:
        alive.shutdown()
    assert len(gone) == 1
    assert gone[0].startswith("draft-eagle3-k3: its server died") and "layer input tensor is null" in gone[0]
