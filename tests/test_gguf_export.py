"""Phoenix's drafts as GGUF for llama.cpp: the files read back as llama.cpp expects them, bad sources are one
line, and a real llama-server drafts with an exported draft model and an exported EAGLE-3 head and accepts."""

from __future__ import annotations

import json
import shutil
import urllib.request

import numpy as np
import pytest
import torch
from test_browser import free_port
from test_llamacpp import pytestmark as needs_llama_server

from engine.decode.eagle3.checkpoint import save_head
from engine.decode.eagle3.head import Eagle3Head, HeadConfig, default_taps
from engine.engines import llamacpp
from engine.engines.config import ExportConfig
from engine.engines.gguf_export import export, permute
from engine.engines.llamacpp import LlamaCppConfig
from engine.errors import PhoenixError
from engine.paths import EMBEDDED_DIR

TOKEN = 300  # the one token the tiny target always says (an ordinary token of the embedded tokenizer)
LAYERS, HIDDEN = 2, 64


def tiny_target(path):
    """A Llama of the embedded tokenizer that says TOKEN after anything: every embedding is the same vector and
    every block adds nothing, so the last hidden state is one known vector whose logit is highest at TOKEN."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=4096,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=0,
        max_position_embeddings=1024,
    )
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.model.embed_tokens.weight.fill_(1.0)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
        model.lm_head.weight[TOKEN] = 1.0
    model.save_pretrained(path)
    shutil.copy(EMBEDDED_DIR / "target" / "tokenizer.json", path / "tokenizer.json")
    return path


def tiny_head(path):
    """A head that drafts TOKEN: the target's taps are all ones, fc averages them into ones, the layer adds
    nothing, so the normed state is ones and only draft id 0's logit is not zero; d2t maps id 0 to TOKEN."""
    head = Eagle3Head(
        HeadConfig(
            hidden_size=HIDDEN,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            vocab_size=4096,
            draft_vocab_size=16,
            target_hidden_size=HIDDEN,
            taps=default_taps(LAYERS),
        )
    )
    with torch.no_grad():
        head.fc.weight.fill_(1.0 / (3 * HIDDEN))
        head.midlayer.self_attn.o_proj.weight.zero_()
        head.midlayer.mlp.down_proj.weight.zero_()
        head.lm_head.weight.zero_()
        head.lm_head.weight[0] = 1.0
        head.get_buffer("d2t")[0] = TOKEN  # an offset: draft id 0 is target id 0 + TOKEN
    save_head(head, path, dtype=torch.float32)
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    target = tiny_target(root / "target")
    out = {"target": export(str(target), ExportConfig(out=str(root / "target.gguf"), tokenizer="hf"))}
    out["draft"] = export(str(target), ExportConfig(out=str(root / "draft.gguf"), tokenizer=str(root / "target.gguf")))
    head = tiny_head(root / "head")
    out["head"] = export(str(head), ExportConfig(out=str(root / "head.gguf"), tokenizer=str(root / "target.gguf")))
    return out


def read(path):
    import gguf

    return gguf.GGUFReader(path)


def test_q_and_k_rows_move_into_llama_cpps_rope_pairs():
    w = np.arange(8)[:, None].repeat(2, axis=1)  # one head of 8 rows: halves (0..3) and (4..7)
    assert permute(w, 1)[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


def test_a_draft_model_reads_back_as_llama_with_the_targets_tokenizer_key_for_key(exported):
    target, draft = read(exported["target"]["path"]), read(exported["draft"]["path"])
    assert draft.fields["general.architecture"].contents() == "llama" and exported["draft"]["kind"] == "llama"
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
        assert draft.fields[key].contents() == target.fields[key].contents()
    names = {t.name for t in draft.tensors}
    assert {"token_embd.weight", "output.weight", "blk.1.attn_q.weight", "output_norm.weight"} <= names
    digest = exported["draft"]["source_sha256"]
    assert draft.fields["phoenix.source_sha256"].contents() == digest


def test_a_head_reads_back_as_eagle3_with_its_taps_and_absolute_target_ids(exported):
    head = read(exported["head"]["path"])
    assert head.fields["general.architecture"].contents() == "eagle3"
    assert head.fields["eagle3.target_layers"].contents() == list(default_taps(LAYERS))
    assert head.fields["eagle3.target_hidden_size"].contents() == HIDDEN
    d2t = next(t for t in head.tensors if t.name == "d2t")
    assert d2t.data.dtype == np.int64 and d2t.data[0] == TOKEN and d2t.data[1:].tolist() == list(range(1, 16))
    names = {t.name for t in head.tensors}
    assert "t2d" not in names and "token_embd.weight" not in names and "blk.0.attn_norm_2.weight" in names


def test_the_default_name_carries_the_source_hash(tmp_path, monkeypatch):
    import engine.engines.gguf_export as g

    monkeypatch.setattr(g, "DATA_DIR", tmp_path)
    done = export(str(tiny_target(tmp_path / "t")), ExportConfig(tokenizer="hf", dtype="f32"))
    assert done["path"] == str(tmp_path / "gguf" / f"t-{done['source_sha256'][:12]}.gguf")
    assert not list((tmp_path / "gguf").glob("*.partial"))


def test_what_cannot_be_exported_is_one_line(tmp_path):
    with pytest.raises(PhoenixError, match="no config.json and model.safetensors"):
        export(str(tmp_path), ExportConfig())
    head = tiny_head(tmp_path / "head")
    cfg = json.loads((head / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 1]
    (head / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(PhoenixError, match="needs 3 target layers"):
        export(str(head), ExportConfig(out=str(tmp_path / "h.gguf"), tokenizer="hf"))
    with pytest.raises(PhoenixError, match="no such GGUF"):
        export(str(tiny_target(tmp_path / "t")), ExportConfig(tokenizer=str(tmp_path / "missing.gguf")))


def test_out_is_never_a_folder_a_path_under_a_file_or_a_file_that_is_not_a_gguf(tmp_path):
    target = str(tiny_target(tmp_path / "t"))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    for out, says in (
        (notes, "exists and is not a GGUF"),
        (tmp_path, "is a folder"),
        (notes / "x.gguf", "is a file, not a folder"),
    ):
        with pytest.raises(PhoenixError, match=says):
            export(target, ExportConfig(out=str(out), tokenizer="hf", dtype="f32"))
    assert notes.read_text() == "my notes"
    done = export(target, ExportConfig(out=str(tmp_path / "m.gguf"), tokenizer="hf", dtype="f32"))
    again = export(target, ExportConfig(out=done["path"], tokenizer="hf", dtype="f32"))  # its own GGUF: replaced
    assert again["path"] == done["path"]


def _drafts(exported, spec_type: str, draft: str) -> dict:
    cfg = LlamaCppConfig(
        model=exported["target"]["path"],
        spec_type=spec_type,
        draft_model=exported[draft]["path"],
        draft_max=4,
        draft_p_min=0.0,  # a tiny head's softmax over 16 ids is not confident: any probability drafts
        port=free_port(),
        ctx=512,
        parallel=1,
        startup_s=60,
    )
    llamacpp.start(cfg)
    try:
        body = json.dumps({"prompt": "def add(a, b):", "max_tokens": 24, "temperature": 0}).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{cfg.port}/completion", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())
    finally:
        llamacpp.stop(cfg)


@pytest.mark.services
@pytest.mark.parametrize("spec_type,draft", [("draft-simple", "draft"), ("draft-eagle3", "head")])
def test_a_real_llama_server_drafts_with_the_exported_draft_and_accepts(exported, spec_type, draft):
    for mark in needs_llama_server:
        if mark.name == "skipif" and mark.args[0]:
            pytest.skip(mark.kwargs["reason"])
    answer = _drafts(exported, spec_type, draft)
    timings = answer["timings"]
    assert timings.get("draft_n", 0) > 0, f"{spec_type}: llama.cpp served without drafting: {timings}"
    assert timings["draft_n_accepted"] > 0


def test_a_variant_names_its_spec_type_and_settings_and_a_bad_one_is_one_line():
    from engine.engines.llamacpp import variant

    head = variant("draft-eagle3-k3-p0", LlamaCppConfig())
    assert (head.spec_type, head.draft_max, head.draft_p_min) == ("draft-eagle3", 3, 0.0)
    ngram = variant("ngram-simple-n4-m8", LlamaCppConfig())
    assert (ngram.spec_type, ngram.ngram_n, ngram.ngram_m) == ("ngram-simple", 4, 8)
    with pytest.raises(PhoenixError, match="unknown 'draft-eagle3-x'"):
        variant("draft-eagle3-x", LlamaCppConfig())
    with pytest.raises(PhoenixError, match="draft-p-min must be in 0..1"):
        llamacpp.command(LlamaCppConfig(spec_type="draft-eagle3", draft_model="h.gguf", draft_p_min=1.5))


def test_side_by_side_drafts_with_phoenixs_own_exports_and_says_when_llama_cpp_refused_one(exported, tmp_path):
    from engine.engines import side_by_side as engines

    cfg = engines.EnginesConfig(
        spec_types="none,draft-eagle3-k3,draft-simple-k1",
        head=exported["head"]["path"],
        draft=exported["draft"]["path"],
    )
    servers = engines.servers(cfg)
    assert [s.config.draft_model for s in servers] == ["", exported["head"]["path"], exported["draft"]["path"]]
    assert servers[1].config.draft_max == 3 and servers[2].config.draft_max == 1
    with pytest.raises(PhoenixError, match="names a variant twice"):
        engines.servers(engines.EnginesConfig(spec_types="none,ngram-mod,ngram-mod"))
    log = tmp_path / "server.log"
    log.write_text("I common_speculative_are_compatible: vocabs are not compatible\n")
    files = llamacpp.files
    try:
        llamacpp.files = lambda c, data_dir=None: {"log": log}
        said = engines.refused_draft(servers[2], {"error": None, "draft_n": None})
        assert said and "without drafting" in said and "vocabs are not compatible" in said
        assert engines.refused_draft(servers[2], {"error": None, "draft_n": 5}) is None
        assert engines.refused_draft(servers[0], {"error": None, "draft_n": None}) is None  # none drafts nothing
    finally:
        llamacpp.files = files


def test_each_servers_requests_carry_the_longest_draft_it_proposes():
    from engine.engines.llamacpp import variant
    from engine.engines.managed import Server

    def draft_length(c):
        return Server("v", c).draft_length

    base = LlamaCppConfig()
    assert draft_length(variant("none", base)) == 0
    assert draft_length(variant("draft-eagle3-k2", base)) == 2
    assert draft_length(variant("ngram-simple-n3-m6", base)) == 6  # ngram-simple drafts size-m, not n-max
    assert draft_length(variant("ngram-mod", base)) == base.draft_max


def test_the_default_tokenizer_is_the_target_the_draft_was_made_for(tmp_path):
    """A Qwen head exported with SmolLM2's tokenizer (the old default) serves with speculation silently off."""
    from engine.catalog import NAMED, QWEN15, SMOLLM2, SMOLLM2_DRAFT
    from engine.engines.gguf_export import target_of

    head = tiny_head(tmp_path / "head")
    (head / "phoenix_card.json").write_text(json.dumps({"role": "eagle3-head", "target": QWEN15}))
    assert target_of(head) == QWEN15
    (head / "phoenix_card.json").write_text(json.dumps({"role": "eagle3-head", "target": "/somewhere/else"}))
    assert target_of(head) == "hf"  # a user's own target: the folder's own tokenizer
    assert target_of(tmp_path / "nothing-here") == "hf"
    assert target_of(NAMED[SMOLLM2_DRAFT].path) == SMOLLM2  # built before its card named its target
    assert ExportConfig().tokenizer == "auto"
