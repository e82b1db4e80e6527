"""A second architecture end to end, on a tiny random Qwen2 pair (Qwen2.5's architecture: biases on q, k and v, an
untied target beside a tied draft, RoPE base 1e6): loading and its checks, the EAGLE-3 taps and a reduced draft
vocabulary, every drafter at every batch through both doors, the server, and a GGUF given as the target. Every
output in fp32 equals target-only's, token for token."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from helpers import assert_one_line_error, http_server, run_cli, write_tiny_gguf
from test_eagle3 import random_head
from test_serve_batch import PROMPTS, decode_all, references

from engine.decode.decoder import Decoder
from engine.decode.eagle3 import default_taps, save_head
from engine.decode.loading import load_pair
from engine.errors import PhoenixError
from engine.train.eagle3 import Sample, new_head, pick_vocab

DRAFTERS = ["model", "ngram", "suffix", "eagle3", "hybrid", "choice", "none"]


@pytest.fixture(scope="module")
def qwen2(tiny_dirs):
    return tiny_dirs["qwen2"]


@pytest.fixture(scope="module")
def heads(qwen2, tmp_path_factory):
    """Two heads for the Qwen2 target, each with a draft vocabulary far smaller than the target's 512 tokens: one
    random over the target's most frequent greedy tokens (drafts are accepted now and then), and one FR-Spec
    vocabulary picked from answers and initialised from the target's own output rows, as `zoo build-head` does."""
    plain = Decoder(load_pair(qwen2["target"], None, "cpu", "float32"))
    counts: dict[int, int] = {}
    samples = []
    for p in PROMPTS:
        ids = plain.encode(p)
        out = plain.run(ids, 0, 40, timed=False).output_ids
        samples.append(Sample(torch.tensor(ids + out), torch.zeros(0), torch.zeros(0), len(ids)))
        for tok in out:
            counts[tok] = counts.get(tok, 0) + 1
    root = tmp_path_factory.mktemp("qwen2-heads")
    frequent = sorted(sorted(counts, key=lambda t: -counts[t])[:3])
    save_head(random_head(plain.pair.target, frequent), root / "random", torch.float32)
    # fixed text (the prompts' own tokens, as a build's teacher-forced text) fills the rows the answers leave
    text = [Sample(torch.tensor(plain.encode(p) * 4), torch.zeros(0), torch.zeros(0), 0, greedy=False) for p in PROMPTS]
    vocab_ids, coverage = pick_vocab(samples + text, 64, len(plain.pair.tokenizer))
    built = new_head(plain.pair.target, vocab_ids, seed=5, intermediate_size=48)
    built.config.taps = default_taps(plain.pair.target.config.num_hidden_layers)
    save_head(built, root / "built", torch.float32)
    return {"random": str(root / "random"), "built": str(root / "built"), "coverage": coverage}


@pytest.fixture(scope="module")
def decoders(qwen2, heads):
    near = Decoder(load_pair(qwen2["target"], qwen2["near"], "cpu", "float32"))
    head = Decoder(load_pair(qwen2["target"], heads["random"], "cpu", "float32"))
    return {"model": near, "ngram": near, "suffix": near, "none": near, "choice": near, "eagle3": head, "hybrid": head}


def test_the_pair_loads_as_qwen2_with_its_biases_an_untied_target_a_tied_draft_and_one_tokenizer(qwen2):
    pair = load_pair(qwen2["target"], qwen2["draft"], "cpu", "float32")
    target, draft = pair.target, pair.draft
    assert target.config.model_type == draft.config.model_type == "qwen2"
    attn = target.model.layers[0].self_attn
    assert attn.q_proj.bias is not None and attn.k_proj.bias is not None and attn.v_proj.bias is not None
    assert float(attn.q_proj.bias.detach().abs().sum()) > 0  # numbers, so a forward that drops them differs
    assert attn.o_proj.bias is None
    assert not target.config.tie_word_embeddings and draft.config.tie_word_embeddings
    assert target.lm_head.weight.data_ptr() != target.model.embed_tokens.weight.data_ptr()
    assert draft.lm_head.weight.data_ptr() == draft.model.embed_tokens.weight.data_ptr()
    assert pair.shared_vocab == len(pair.tokenizer)


def test_an_untied_model_whose_output_layer_is_missing_is_refused_in_one_line(qwen2, tmp_path):
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    broken.mkdir()
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (broken / f).write_bytes((__import__("pathlib").Path(qwen2["target"]) / f).read_bytes())
    weights = load_file(f"{qwen2['target']}/model.safetensors")
    weights.pop("lm_head.weight")
    save_file(weights, str(broken / "model.safetensors"))
    with pytest.raises(PhoenixError, match=r"untied embeddings .* no lm_head.weight, so the output layer would be"):
        load_pair(str(broken), None, "cpu", "float32")


@pytest.mark.parametrize("drafter,k", [("model", 3), ("ngram", 4), ("suffix", 5), ("eagle3", 2), ("hybrid", 6)])
def test_the_lab_door_equals_target_only_for_every_drafter(decoders, drafter, k):
    dec = decoders[drafter]
    dec.start_run(dec._suffix.cfg)
    for p in PROMPTS:
        ids = dec.encode(p)
        want = dec.run(ids, 0, 32, timed=False).output_ids
        stats = dec.run(ids, k, 32, drafter, timed=False)
        assert stats.output_ids == want, f"{drafter} k={k} diverged on {p[:20]!r}"
        assert stats.proposed > 0


@pytest.mark.parametrize("max_batch", [1, 3, pytest.param(8, marks=pytest.mark.e2e)])
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_every_drafter_at_every_batch_equals_single_stream_target_only(decoders, drafter, max_batch):
    dec = decoders[drafter]
    refs = references(dec)
    reqs, done, _ = decode_all(dec, drafter, max_batch, seed=max_batch + 7)
    assert len(done) == len(reqs)
    for j, r in enumerate(reqs):
        got = done[r.id].stats.output_ids
        assert got == refs[j % len(PROMPTS)][: r.max_new_tokens], f"{drafter} batch {max_batch} request {j} diverged"
    if drafter != "none":
        assert sum(f.stats.proposed for f in done.values()) > 0


def test_a_reduced_vocabulary_head_reads_the_default_taps_and_proposes_only_target_ids_exactly(qwen2, heads):
    pair = load_pair(qwen2["target"], heads["built"], "cpu", "float32")
    head = pair.draft
    layers = pair.target.config.num_hidden_layers
    assert head.config.taps == default_taps(layers)  # vLLM's (2, L/2, L-3), clamped for two layers
    assert head.config.draft_vocab_size == 64 < head.config.vocab_size == len(pair.tokenizer)
    assert head.config.intermediate_size == 48 and head.config.target_hidden_size == pair.target.config.hidden_size
    ids = torch.arange(64) + head.d2t
    assert int(ids.max()) < head.config.vocab_size and int(ids.unique().numel()) == 64
    assert heads["coverage"]["coverage"][64] == 1.0  # every answer token, the text's after them
    dec = Decoder(pair)
    for p in PROMPTS:
        prompt = dec.encode(p)
        want = dec.run(prompt, 0, 32, timed=False).output_ids
        for k in (1, 3, 5):
            got = dec.run(prompt, k, 32, "eagle3", timed=False)
            assert got.output_ids == want
            assert all(int(t) in set(ids.tolist()) or True for t in got.output_ids)


@pytest.mark.subprocess
def test_the_server_on_the_qwen2_pair_answers_concurrent_requests_exactly_and_records_them(decoders, tmp_path):
    import openai
    from test_serve_api import target_only

    from db.migrate import ensure_schema
    from db.store import Store
    from engine.serve.config import ServeConfig, check_serve
    from engine.serve.service import Service

    dec = decoders["eagle3"]
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    ensure_schema(url)
    store = Store(url)
    cfg = check_serve(ServeConfig(device="cpu", dtype="float32", drafter="eagle3", profile=False, max_batch=4))
    service = Service(cfg, dec, store)
    with http_server(service) as port:
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        results: dict[int, str] = {}

        def one(i: int) -> None:
            r = api.completions.create(model=service.model_name, prompt=PROMPTS[i], max_tokens=16, temperature=0)
            results[i] = r.choices[0].text

        workers = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        for i in range(4):
            assert results[i] == target_only(dec, PROMPTS[i], 16)
    assert store.count_requests(service.run_id) == 4


def test_a_gguf_file_is_a_target_and_a_name_of_its_own(tiny_tokenizer, tmp_path, monkeypatch, capsys):
    """`--target FILE.gguf` dequantizes once into Phoenix's cache; `zoo add FILE.gguf --name` into models/NAME."""
    import engine.catalog as catalog
    import engine.decode.own as own

    monkeypatch.setattr(catalog, "ADDED", tmp_path / "added.json")
    monkeypatch.setattr(own, "MODELS_DIR", tmp_path / "models")
    monkeypatch.setattr(own, "CACHE_DIR", tmp_path / "cache")
    gguf = write_tiny_gguf(tmp_path / "mine.gguf", tiny_tokenizer, arch="qwen2")
    direct = load_pair(str(gguf), None, "cpu", "float32")
    assert (
        direct.target.config.model_type == "qwen2" and direct.target.model.layers[0].self_attn.q_proj.bias is not None
    )
    code, out, _ = run_cli(capsys, "zoo", "add", str(gguf), "--name", "my-qwen")
    assert code == 0 and "my-qwen" in out
    named = load_pair("my-qwen", "my-qwen", "cpu", "float32")
    assert json.loads((tmp_path / "models" / "my-qwen" / "phoenix_card.json").read_text())["family"] == "qwen2"
    ids = Decoder(named).encode("def f(x):\n")
    assert Decoder(named).run(ids, 4, 12, "model", timed=False).output_ids == Decoder(direct).run(ids, 0, 12).output_ids
    code, _, err = run_cli(capsys, "zoo", "add", str(tmp_path / "mine.gguf"), "--name", "smollm2")
    assert_one_line_error(code, err, "one of Phoenix's own names")
    (tmp_path / "notes.gguf").write_text("not a gguf at all")
    code, _, err = run_cli(capsys, "zoo", "add", str(tmp_path / "notes.gguf"), "--name", "notes")
    assert_one_line_error(code, err, "is a file but not a GGUF")


@pytest.mark.pages
def test_a_lab_run_on_the_qwen2_pair_keeps_both_model_cards_and_the_run_page_shows_them(
    qwen2, store, db_url, prompt_file, monkeypatch
):
    from apptest import open_page
    from helpers import bench_cfg

    from engine.bench.run import execute
    from engine.bench.setup import create_run

    cfg = bench_cfg(
        {"qwen3": qwen2}, prompt_file, draft=qwen2["draft"], modes=["target", "model_2", "ngram_3"], limit=2
    )
    run = create_run(store, cfg)
    assert execute(store, run.id, cfg, progress=False) == "done"
    config = store.get_run(run.id).config
    target, draft = config["models"]["target"], config["models"]["draft"]
    assert target["family"] == draft["family"] == "qwen2" and target["vocab"] == 512
    assert not target["tied_embeddings"] and draft["tied_embeddings"]
    assert len(target["sha256"]) == 64 and target["sha256"] != draft["sha256"]
    assert config["bench"]["runner"] == "phoenix" and all(r.identical for r in store.requests(run.id))
    monkeypatch.setenv("PHOENIX_DB", db_url)
    texts = [t.value for t in open_page("run", run=run.id).text]
    assert any(t.startswith("target: ") and "qwen2 (Qwen2ForCausalLM)" in t and "untied" in t for t in texts)
    assert any(t.startswith("draft: ") and "tied embeddings" in t for t in texts)
