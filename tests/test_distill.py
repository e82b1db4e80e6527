"""Draft distillation on tiny models: end to end, merge exactness, no test leakage, resume."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import interrupt_after

from engine.decode.decoder import format_prompt
from engine.decode.spec import generate
from engine.errors import PhoenixError
from engine.prompts.sets import humaneval, split
from engine.train.config import DistillConfig
from engine.train.distill import Work, training_prompts
from engine.train.job import run


def cfg_for(tiny_dirs, prompt_file, tmp_path, **kw):
    d = tiny_dirs["qwen3"]
    base = dict(
        target=d["target"],
        draft=d["draft"],
        prompts=prompt_file,
        max_new_tokens=12,
        batch_size=2,
        epochs=2,
        lora_r=4,
        lora_alpha=8,
        lr=5e-3,
        checkpoint_every=1,
        save_dtype="float32",
        out=str(tmp_path / "distilled"),
        eval_prompts=prompt_file,
        eval_limit=2,
        eval_max_new_tokens=10,
        eval_ks="2",
    )
    base.update(kw)
    return DistillConfig(**base)


@pytest.fixture(scope="module")
def distilled(tiny_dirs, tmp_path_factory):
    """One distillation with --eval, built once: the tests that only read its output share it."""
    from helpers import migrated, write_prompts

    from db.store import Store

    root = tmp_path_factory.mktemp("distilled")
    prompt_file = write_prompts(root / "prompts.jsonl")
    url = f"sqlite:///{root / 'phoenix.db'}"
    migrated(url)
    store = Store(url)
    cfg = cfg_for(tiny_dirs, str(prompt_file), root, epochs=6, eval=True)
    return {"result": run(cfg, store, progress=False), "out": root / "distilled", "store": store}


@pytest.mark.train
def test_the_pipeline_runs_end_to_end_and_records_its_job_with_both_runs(distilled):
    result, out, store = distilled["result"], distilled["out"], distilled["store"]
    assert (out / "config.json").exists() and (out / "model.safetensors").exists()
    card = (out / "README.md").read_text()
    assert "base_model:" in card and "LoRA r=4" in card and f"{result['steps']} steps" in card
    assert result["answers"] == 4 and result["steps"] == 12  # 4 answers, batch 2, 6 epochs
    assert set(result["stage_seconds"]) == {"answers", "lora", "merge"}
    job = store.get_distill(result["distill_id"])
    assert job.status == "done" and len(job.losses) == 12 and job.config["distill"]["lora_r"] == 4
    assert job.before_run_id and job.after_run_id and job.before_run_id != job.after_run_id
    assert store.get_run(job.after_run_id).draft == str(out)
    assert store.distill_for_run(job.before_run_id).id == job.id
    ev = job.evaluation
    assert set(ev["arms"]) == {"model_2"} and ev["arms"]["model_2"]["after"]["n"] == 2
    assert len(ev["arms"]["model_2"]["before"]["per_position"]) == 2
    assert all(r.identical for r in store.requests(job.after_run_id))


@pytest.mark.train
def test_training_lowers_the_answer_loss(distilled):
    assert distilled["result"]["last_loss"] < distilled["result"]["first_loss"]


@pytest.mark.train
def test_merged_model_loads_without_peft_and_decodes_like_the_adapter_wrapped_one(tiny_dirs, distilled):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = distilled["out"]
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    base = AutoModelForCausalLM.from_pretrained(tiny_dirs["qwen3"]["draft"], dtype=torch.float32)
    wrapped = PeftModel.from_pretrained(base, out / "work" / "ckpt" / "adapter").eval()
    tok = AutoTokenizer.from_pretrained(out)
    for text in ("def add(a, b):\n", "import os\nclass C:\n"):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            x = torch.tensor([ids])
            torch.testing.assert_close(merged(input_ids=x).logits, wrapped(input_ids=x).logits, rtol=1e-4, atol=1e-4)
            a = generate(merged, None, ids, 0, 20, None).output_ids
            b = generate(wrapped, None, ids, 0, 20, None).output_ids
        assert a == b


def test_no_held_out_test_prompt_reaches_the_teacher(tiny_dirs, tmp_path):
    train = training_prompts(DistillConfig(prompts="humaneval-train"))
    _, test = split(humaneval())
    assert len(train) == 114 and not {p.id for p in train} & {p.id for p in test}
    leaky = tmp_path / "leaky.jsonl"
    leaky.write_text(json.dumps({"id": "mine", "prompt": test[3].text}) + "\n")
    with pytest.raises(PhoenixError, match="held-out test prompts"):
        training_prompts(DistillConfig(prompts=str(leaky)))
    for spec in ("humaneval-test", "humaneval"):
        with pytest.raises(PhoenixError, match="held-out test split"):
            training_prompts(DistillConfig(prompts=spec))


@pytest.mark.train
def test_teacher_answers_are_the_targets_greedy_output(tiny_dirs, prompt_file, tmp_path):
    from engine.decode.loading import load_pair

    cfg = cfg_for(tiny_dirs, prompt_file, tmp_path)
    run(cfg, None, progress=False)
    pair = load_pair(cfg.target, None, "cpu", "float32")
    for row in Work(tmp_path / "distilled").read_answers():
        with torch.inference_mode():
            expected = generate(
                pair.target, None, row["prompt_ids"], 0, cfg.max_new_tokens, pair.tokenizer.eos_token_id
            )
        assert row["answer_ids"] == expected.output_ids


class Stop(Exception):
    pass


@pytest.mark.train
@pytest.mark.parametrize("where", ["answers", "lora"])
def test_an_interrupted_job_resumes_where_it_stopped_and_ends_as_an_uninterrupted_one(
    tiny_dirs, prompt_file, tmp_path, store, where
):
    full = run(cfg_for(tiny_dirs, prompt_file, tmp_path / "a"), None, progress=False)
    cfg = cfg_for(tiny_dirs, prompt_file, tmp_path / "b")
    hook = {"on_answer" if where == "answers" else "on_step": interrupt_after(2)}
    with pytest.raises(KeyboardInterrupt):
        run(cfg, store, progress=False, **hook)
    job = store.latest_distill(str((tmp_path / "b" / "distilled").resolve()))
    assert job.status == "interrupted"
    resumed = run(cfg, store, progress=False)
    assert resumed["distill_id"] == job.id
    assert store.get_distill(job.id).status == "done"
    answers = Work(tmp_path / "b" / "distilled").read_answers()
    assert [a["id"] for a in answers] == ["p0", "p1", "p2", "p3"]  # nothing lost, nothing repeated
    assert resumed["steps"] == full["steps"]
    assert resumed["last_loss"] == pytest.approx(full["last_loss"], rel=1e-5)


def test_chat_templates_are_applied_with_thinking_disabled(tiny_tokenizer):
    tok = tiny_tokenizer
    plain = format_prompt(tok, "def f():")
    assert plain == tok("def f():", add_special_tokens=False)["input_ids"]
    tok.chat_template = (
        "{% for m in messages %}<|user|>{{ m['content'] }}{% endfor %}<|assistant|>"
        "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
    )
    try:
        ids = format_prompt(tok, "def f():")
        assert tok.decode(ids).endswith("<|assistant|><think></think>")
    finally:
        tok.chat_template = None


@pytest.mark.parametrize(
    "flag,value,pattern",
    [
        ("--lora-r", "big", "--lora-r expects a number"),
        ("--lora-r", "0", "--lora-r must be >= 1"),
        ("--epochs", "0", "--epochs must be >= 1"),
        ("--batch-size", "0", "--batch-size must be >= 1"),
        ("--eval-ks", "2,x", "--eval-ks must be comma-separated"),
        ("--draft", "none", "needs a draft model"),
    ],
)
def test_bad_distill_options_are_one_line_before_any_work(tmp_path, capsys, flag, value, pattern):
    from engine.cli import main

    out = tmp_path / "out"
    assert main(["distill", flag, value, "--out", str(out), "--db", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert pattern in err[-1] and len(err) == 1
    assert not out.exists()
