"""The embedded-pair builder, at toy sizes: every stage runs and the result loads like any model."""

from __future__ import annotations

import pytest

from engine.decode.decoder import Decoder
from engine.decode.loading import load_pair
from engine.train.config import ZooConfig
from engine.train.zoo import build, distill_draft_on_answers, teacher_sequences


def toy(out) -> ZooConfig:
    return ZooConfig(
        out=str(out),
        target_hidden=64,
        target_layers=1,
        target_ffn=128,
        target_heads=4,
        target_kv_heads=2,
        target_steps=2,
        draft_hidden=32,
        draft_layers=1,
        draft_ffn=64,
        draft_heads=2,
        draft_kv_heads=1,
        draft_steps=2,
        seq_prompts=3,
        seq_new_tokens=4,
        seq_steps=2,
        warmup_steps=1,
        target_batch=2,
        draft_batch=2,
        seq_batch=2,
    )


@pytest.mark.train
def test_zoo_build_writes_a_pair_that_loads_and_decodes_exactly(tmp_path):
    cfg = toy(tmp_path)
    summary = build(cfg)
    assert summary["tokens"] > 1_000_000
    assert distill_draft_on_answers(cfg)["sequences"] == 3
    pair = load_pair(str(tmp_path / "target"), str(tmp_path / "draft"), "cpu", "float32")
    dec = Decoder(pair)
    ids = dec.encode("def f(x):\n")
    assert dec.run(ids, 3, 12, "model").output_ids == dec.run(ids, 0, 12).output_ids


def test_teacher_answers_never_use_held_out_test_prompts(tmp_path, monkeypatch):
    import torch

    from engine.prompts.sets import humaneval, split

    _, test = split(humaneval())
    seen = []

    class FakeTok:
        eos_token_id = 0

        def __call__(self, text, add_special_tokens=False):
            seen.append(text)
            return {"input_ids": [1, 2, 3]}

    monkeypatch.setattr("engine.train.zoo.generate", lambda *a, **k: type("S", (), {"output_ids": [4]})())
    cfg = ZooConfig(seq_prompts=200)
    teacher_sequences(None, FakeTok(), torch.arange(1000), cfg)
    assert seen and not ({p.text for p in test} & set(seen))
