"""The real target's draft, built at toy size on a tiny target: it loads, decodes exactly, never sees test prompts."""

from __future__ import annotations

import ast
import json

import pytest

import engine.train.draft as draft_mod
from engine.decode.decoder import Decoder
from engine.decode.loading import load_pair
from engine.errors import PhoenixError
from engine.prompts.sets import humaneval, split
from engine.train.config import DraftConfig
from engine.train.draft import build_draft, corpus_ids


def toy(target: str, out) -> DraftConfig:
    return DraftConfig(
        target=target,
        out=str(out),
        hidden=32,
        heads=2,
        kv_heads=1,
        ffn=64,
        layers=1,
        steps=2,
        batch=2,
        seq_len=32,
        warmup_steps=1,
        teacher_dtype="float32",
        answer_prompts=3,
        answer_tokens=6,
        answer_batch=2,
        seq_steps=2,
        seq_batch=2,
    )


@pytest.mark.train
def test_a_toy_draft_loads_beside_its_target_and_decodes_exactly(tiny_dirs, tmp_path):
    target = tiny_dirs["llama"]["target"]
    result = build_draft(toy(target, tmp_path / "draft"))
    assert result["parameters"] > 0 and set(result["stage_seconds"]) == {
        "prepare",
        "distill",
        "answers",
        "answers_training",
    }
    card = json.loads((tmp_path / "draft" / "phoenix_card.json").read_text())
    assert card["data"]["held_out_checked"] == 50 and card["data"]["humaneval_train_prompts"] == 114
    assert len(card["kl_loss"]) == 2 and len(card["answers_loss"]) == 2 and card["draft_config"]["hidden"] == 32
    assert card["data"]["answers"]["prompts"] == 3 and card["data"]["answers"]["answer_tokens"] > 0
    dec = Decoder(load_pair(target, str(tmp_path / "draft"), "cpu", "float32"))
    ids = dec.encode("def f(x):\n    return")
    assert dec.run(ids, 3, 16, "model").output_ids == dec.run(ids, 0, 16).output_ids


def test_a_held_out_prompt_in_the_corpus_is_refused(tiny_tokenizer, monkeypatch):
    _, test = split(humaneval())
    monkeypatch.setattr(draft_mod, "stdlib_texts", lambda: ["import os\n", test[7].text])
    with pytest.raises(PhoenixError, match=r"held-out HumanEval prompt\(s\) appear in the stdlib corpus"):
        corpus_ids(tiny_tokenizer)


def test_the_corpus_holds_train_prompts_and_no_test_prompt(tiny_tokenizer, monkeypatch):
    monkeypatch.setattr(draft_mod, "stdlib_texts", lambda: ["import os\n"])
    ids, data = corpus_ids(tiny_tokenizer)
    text = tiny_tokenizer.decode(ids)
    train, test = split(humaneval())
    assert data["humaneval_train_prompts"] == len(train) == 114
    assert all(p.text.strip()[:60] in text for p in train[:5])
    assert not any(p.text.strip()[:200] in text for p in test)


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["--steps", "0"], "--steps must be >= 1"),
        (["--hidden", "100", "--heads", "3"], "--hidden must be a multiple of --heads"),
        (["--steps", "abc"], "--steps expects a number"),
    ],
)
def test_bad_draft_options_are_one_line_before_the_target_loads(capsys, tmp_path, argv, pattern):
    from helpers import assert_one_line_error, run_cli

    code, _, err = run_cli(capsys, "zoo", "build-draft", "smollm2", "--out", str(tmp_path / "d"), *argv)
    assert_one_line_error(code, err, pattern)
    assert not (tmp_path / "d").exists()


@pytest.mark.train  # parses the standard library for its shortest functions, as the draft builder does
def test_the_answer_prompts_are_train_prompts_then_stdlib_functions_and_never_a_held_out_prompt():
    from engine.train.draft import answer_prompts

    train, test = split(humaneval())
    prompts = answer_prompts(300)
    assert prompts[: len(train)] == [p.text for p in train] and len(prompts) == 300
    assert not any(t.text.strip() in p for t in test for p in prompts)
    for p in prompts[len(train) :]:  # a function cut after its docstring, HumanEval's shape
        fn = ast.parse(p + "    pass\n").body[0]
        assert isinstance(fn, ast.FunctionDef) and ast.get_docstring(fn)
