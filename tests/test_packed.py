"""Prepacked linear layers (engine.decode.packed): used only where a row's output does not depend on the batch, so
greedy speculation stays exact on them; `auto` packs only where the model's widest layer measures faster."""

from __future__ import annotations

import torch

from engine.decode.decoder import Decoder
from engine.decode.loading import load_pair
from engine.decode.packed import PackedLinear, batch_invariant, can_pack, pack


def test_off_packs_nothing_and_auto_names_its_measurement(tiny_dirs):
    fp32 = load_pair(tiny_dirs["qwen3"]["target"], None, "cpu", "float32").target
    assert pack(fp32, "off") == "off"
    assert not any(isinstance(m, PackedLinear) for m in fp32.modules())
    note = pack(fp32, "auto")
    assert "probe" in note and "ms" in note  # either way, the choice says what it measured
    assert note.startswith("packed ") == any(isinstance(m, PackedLinear) for m in fp32.modules())


def test_a_packed_fp32_model_stays_exact_under_speculation_and_batch_invariant(tiny_dirs):
    d = tiny_dirs["qwen3"]
    dec = Decoder(load_pair(d["target"], d["near"], "cpu", "float32"))
    note = pack(dec.pair.target, "on")
    assert note.startswith("packed "), note
    layer = dec.pair.target.model.layers[0].mlp.up_proj
    assert isinstance(layer, PackedLinear) and batch_invariant(layer)
    x = torch.randn(3, 5, dec.pair.target.config.hidden_size)
    assert layer(x).shape == (3, 5, layer.out_features)
    for text in ("def add(a, b):\n", "import os\nclass Config:\n"):
        ids = dec.encode(text)
        want = dec.run(ids, 0, 24, timed=False).output_ids
        for drafter, k in (("model", 3), ("ngram", 4), ("suffix", 2)):
            assert dec.run(ids, k, 24, drafter, timed=False).output_ids == want


def test_a_packed_bf16_model_decodes_what_the_plain_one_does(tiny_dirs):
    d = tiny_dirs["qwen3"]
    plain = Decoder(load_pair(d["target"], d["near"], "cpu", "bfloat16"))
    packed = Decoder(load_pair(d["target"], d["near"], "cpu", "bfloat16"))
    if can_pack(packed.pair.target) is not None:  # a CPU without oneDNN bf16: refused with the reason
        assert pack(packed.pair.target).startswith("off: no oneDNN bf16")
        return
    note = pack(packed.pair.target, "on")
    assert note.startswith("packed ") and any(isinstance(m, PackedLinear) for m in packed.pair.target.modules())
    for text in ("def add(a, b):\n", "import os\nclass Config:\n", "x"):
        ids = plain.encode(text)
        want = plain.run(ids, 0, 24, timed=False).output_ids
        assert packed.run(ids, 0, 24, timed=False).output_ids == want


def test_fused_groups_compute_what_their_layers_did_and_keep_the_models_parameters(tiny_dirs):
    """q, k, v and gate, up as one packed GEMM each where Phoenix's runner runs (engine.decode.packed.fuse): the
    state dict keeps its names, transformers' modeling through the parts gives the runner's logits, each part's
    output is its layer's, and fp32 speculation through the fused runner stays exact."""
    from engine.decode.loading import prepare
    from engine.decode.packed import Part, group_of, pack_pair

    d = tiny_dirs["qwen2"]
    plain = load_pair(d["target"], None, "cpu", "float32").target
    keys = set(plain.state_dict())
    pair = prepare(load_pair(d["target"], d["near"], "cpu", "float32"), "on", "auto")
    assert "groups fused" in pair.packed, pair.packed
    said = pair.packed
    assert pack_pair(pair, "on") == said == pair.packed  # the server packs again: the run still says it fused
    hf = pair.target.hf
    attn, mlp = hf.model.layers[0].self_attn, hf.model.layers[0].mlp
    assert isinstance(attn.q_proj, Part) and group_of(attn.q_proj, attn.k_proj, attn.v_proj) is not None
    assert group_of(mlp.gate_proj, mlp.up_proj) is not None
    assert group_of(attn.k_proj, attn.q_proj, attn.v_proj) is None  # out of order: the runner calls each
    assert set(hf.state_dict()) == keys  # the fused weight is not a parameter
    x = torch.randn(4, hf.config.hidden_size)
    with torch.inference_mode():
        for name in ("q_proj", "k_proj", "v_proj"):
            layer = plain.model.layers[0].self_attn.get_submodule(name)
            assert torch.allclose(getattr(attn, name)(x), layer(x), atol=1e-5)
        ids = torch.tensor([[5, 9, 2, 7, 11]])
        assert torch.allclose(pair.target(input_ids=ids).logits, hf(input_ids=ids).logits, atol=1e-5)
    dec = Decoder(pair)
    ids = dec.encode("def add(a, b):\n")
    want = dec.run(ids, 0, 20, timed=False).output_ids
    for drafter, k in (("model", 3), ("ngram", 4)):
        assert dec.run(ids, k, 20, drafter, timed=False).output_ids == want
