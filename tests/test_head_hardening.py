"""An EAGLE-3 head folder that is wrong in any way is one line, before anything large is allocated or read, and a
head that could not draft is refused instead of drafting at 0% without a word."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.decode.eagle3.checkpoint import load_head, save_head, vocab_maps
from engine.decode.eagle3.head import Eagle3Head, HeadConfig
from engine.errors import PhoenixError

pytestmark = pytest.mark.fast


@pytest.fixture
def head_dir(tmp_path):
    torch.manual_seed(0)
    head = Eagle3Head(HeadConfig(8, 2, 1, 16, 32, 8, 8, (0, 1, 2)))
    d2t, t2d = vocab_maps(torch.tensor([1, 3, 5, 7, 9, 11, 13, 15]), 32)
    head.d2t.copy_(d2t)
    head.t2d.copy_(t2d)
    save_head(head, tmp_path / "h", torch.float32)
    return tmp_path / "h"


def _edit_config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def _edit_weights(path, **tensors):
    state = load_file(str(path / "model.safetensors"))
    state.update(tensors)
    save_file(state, str(path / "model.safetensors"))


def _load(path):
    return load_head(path, "head", torch.float32)


def test_a_sound_head_loads(head_dir):
    assert _load(head_dir).config.draft_vocab_size == 8


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"intermediate_size": 10**9}, r"intermediate_size = 1000000000 is not a size in 1\.\.262144"),
        ({"hidden_size": "8"}, r"config\.json lacks hidden_size"),
        ({"num_key_value_heads": -1}, r"num_key_value_heads = -1 is not a size"),
        ({"num_attention_heads": 3}, r"heads do not divide"),
        ({"rms_norm_eps": "tiny"}, r"could not read config\.json"),
        ({"draft_vocab_size": 64}, r"draft_vocab_size 64 exceeds vocab_size 32"),
        ({"intermediate_size": 24}, r"weights do not fit config\.json"),
    ],
)
def test_a_bad_config_is_one_line(head_dir, changes, message):
    _edit_config(head_dir, **changes)
    with pytest.raises(PhoenixError, match=message):
        _load(head_dir)


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"d2t": torch.full((8,), 40, dtype=torch.long)}, r"d2t maps draft ids outside the target's 32 tokens"),
        ({"d2t": -torch.arange(8, dtype=torch.long)}, r"d2t folds 8 draft ids onto 1 target tokens"),
        ({"d2t": torch.zeros(5, dtype=torch.long)}, r"d2t must be 8 integer offsets, got \(5,\)"),
        ({"fc.weight": torch.full((8, 24), float("nan"))}, r"weights hold NaN or infinity \(fc\.weight\)"),
    ],
)
def test_a_head_that_could_not_draft_is_refused(head_dir, tensors, message):
    _edit_weights(head_dir, **tensors)
    with pytest.raises(PhoenixError, match=message):
        _load(head_dir)


def test_unreadable_weights_are_one_line(head_dir):
    (head_dir / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(PhoenixError, match=r"cannot read model\.safetensors .*re-export the head"):
        _load(head_dir)


def test_a_fifo_named_like_the_weights_is_refused_without_blocking(head_dir):
    (head_dir / "model.safetensors").unlink()
    os.mkfifo(head_dir / "model.safetensors")
    with pytest.raises(PhoenixError, match=r"model\.safetensors is not a regular file"):
        _load(head_dir)
