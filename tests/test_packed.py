"""Prepacked linear layers (engine.decode.packed): the same output to the bit where they are used, refused with
the reason where they would not pay, and a bf16 server's greedy outputs unchanged by them."""

from __future__ import annotations

import torch

from engine.decode.decoder import Decoder
from engine.decode.loading import load_pair
from engine.decode.packed import PackedLinear, can_pack, pack


def test_auto_packs_bf16_only_and_says_why_not_otherwise(tiny_dirs):
    fp32 = load_pair(tiny_dirs["qwen3"]["target"], None, "cpu", "float32").target
    assert pack(fp32, "auto").startswith("off: float32")
    assert not any(isinstance(m, PackedLinear) for m in fp32.modules())
    assert pack(fp32, "off") == "off"


def test_a_packed_bf16_model_decodes_what_the_plain_one_does(tiny_dirs):
    d = tiny_dirs["qwen3"]
    plain = Decoder(load_pair(d["target"], d["near"], "cpu", "bfloat16"))
    packed = Decoder(load_pair(d["target"], d["near"], "cpu", "bfloat16"))
    if can_pack(packed.pair.target) is not None:  # a CPU without oneDNN bf16: nothing to compare
        assert pack(packed.pair.target).startswith("off: ")
        return
    note = pack(packed.pair.target)
    assert note.startswith("packed ") and any(isinstance(m, PackedLinear) for m in packed.pair.target.modules())
    for text in ("def add(a, b):\n", "import os\nclass Config:\n", "x"):
        ids = plain.encode(text)
        want = plain.run(ids, 0, 24, timed=False).output_ids
        assert packed.run(ids, 0, 24, timed=False).output_ids == want
    x = torch.randn(3, 5, packed.pair.target.config.hidden_size, dtype=torch.bfloat16)
    layer = packed.pair.target.model.layers[0].mlp.up_proj
    assert isinstance(layer, PackedLinear) and layer(x).shape == (3, 5, layer.out_features)
