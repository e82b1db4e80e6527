"""A head that learns from the server's own traffic (issue 67): `zoo build-head --from-runs RUN[:SHARE],...` takes
the prompts and outputs a run recorded (the target's own text), the first SHARE of them by arrival, for its own
target only, and its card keeps the lineage; what cannot be taken is one line before any work."""

from __future__ import annotations

import pytest
from helpers import migrated, request_record

from db.store import Store
from engine.errors import PhoenixError
from engine.train import traffic
from engine.train.config import HeadBuildConfig


@pytest.mark.fast
def test_runs_and_shares_are_read_and_anything_else_is_one_line():
    assert traffic.parse("12, 15:0.8") == [(12, 1.0), (15, 0.8)]
    for bad in ("x", "12:1.5", "0", "12:0", "12:y"):
        with pytest.raises(PhoenixError, match="--from-runs"):
            traffic.parse(bad)


@pytest.fixture
def served(tmp_path, tiny_tokenizer):
    """A served run of the embedded target: ten answered requests, a warm-up and a failed one among them."""
    url = migrated(f"sqlite:///{tmp_path / 'traffic.db'}")
    store = Store(url)
    run = store.create_run("phoenix serve", {"phoenix_serve": {"max_batch": 8}}, "embedded", None, 0)
    other = store.create_run("another target's", {"phoenix_serve": {}}, "smollm2", None, 0)
    rows = []
    for seq in range(12):
        prompt = f"<|user|>question {seq}: sort a list<|assistant|>"
        rows.append(
            request_record(
                run.id,
                seq,
                mode="phoenix-none_live",
                prompt_id=f"p{seq}",
                prompt_text=prompt,
                output_text=f"use sorted(xs) {seq}",
                warmup=seq == 0,
                error="error: it broke" if seq == 5 else None,
            )
        )
    store.add_requests(rows)
    return url, store, run.id, other.id, tiny_tokenizer


@pytest.mark.fast
def test_the_first_share_of_a_served_runs_answered_requests_become_prompt_plus_output(served):
    url, store, run_id, _, tok = served
    cfg = HeadBuildConfig(target="embedded", from_runs=f"{run_id}:0.5", db=url)
    traffic.check(cfg, store)
    seqs, lineage = traffic.recorded(cfg, tok, store)
    # 10 answered (a warm-up and a failure left out), the first half by arrival: seq 1-4 and 6
    assert lineage == {str(run_id): {"requests": 5, "of": 10, "seq": [1, 6], "served": True}}
    prompt = tok("<|user|>question 1: sort a list<|assistant|>", add_special_tokens=False)["input_ids"]
    answer = tok("use sorted(xs) 1", add_special_tokens=False)["input_ids"]
    assert seqs[0] == prompt + answer and len(seqs) == 5


@pytest.mark.fast
def test_a_run_of_another_target_or_none_at_all_is_refused_before_any_work(served):
    from engine.train.eagle3_build import validate

    url, _, _, other_id, _ = served
    with pytest.raises(PhoenixError, match=f"run #{other_id} decoded smollm2, not the head's target embedded"):
        validate(HeadBuildConfig(target="embedded", from_runs=str(other_id), db=url))
    with pytest.raises(PhoenixError, match="no run #999"):
        validate(HeadBuildConfig(target="embedded", from_runs="999", db=url))


def test_the_build_teacher_forces_the_traffic_ahead_of_the_fixed_text_and_keeps_its_lineage(served, tmp_path):
    from engine.decode.eagle3 import default_taps
    from engine.decode.loading import load_model, pick_dtype
    from engine.train import eagle3_build

    url, _, run_id, _, _ = served
    target, tokenizer = load_model("embedded", "target", "cpu", pick_dtype("float32", "cpu"))
    cfg = HeadBuildConfig(
        target="embedded", from_runs=str(run_id), db=url, fixed_text_tokens=0, answers_dir=str(tmp_path / "a")
    )
    taps = default_taps(target.config.num_hidden_layers)
    samples, info = eagle3_build.fixed(cfg, target, tokenizer, taps, {})
    assert info["from_runs"] == {str(run_id): {"requests": 10, "of": 10, "seq": [1, 11], "served": True}}
    assert len(samples) == 10 and info["traffic_tokens"] == sum(len(s.tokens) for s in samples)
    assert all(s.feats.shape[-1] == 3 * target.config.hidden_size for s in samples)  # the three taps, teacher-forced
