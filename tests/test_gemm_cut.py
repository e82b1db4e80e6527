"""The decode extension's GEMM takes a few-token forward only up to the rows where the model's whole forwards ran
faster with it than with oneDNN's on this CPU (engine.decode.cuts; fast_attention.rows_for): on a Zen 4 it won to
16 rows, on a Xeon with AMX to 8 (SmolLM2) or 2 (Qwen2.5-Coder-1.5B). The cut is set for each of the model's weight
shapes, read by every caller (linear, the layer blocks, the buckets), said in the run's record, and never changes a
fp32 forward."""

from __future__ import annotations

import pytest
import torch
from test_blocks import SHAPE, fused_runner, needs_kernel
from transformers import LlamaConfig, LlamaForCausalLM

from engine.decode import blocks as B
from engine.decode import cuts as P
from engine.decode import fast_attention as FA


@needs_kernel
def test_the_cut_ends_where_onednn_first_wins_a_whole_forward(monkeypatch):
    runner = fused_runner(LlamaForCausalLM(LlamaConfig(**SHAPE)))
    cut = P.measure_cut(runner, reps=1)  # real forwards: whatever this host says, one cut for every weight
    assert cut in (0, *P.CUT_ROWS) and {FA.rows_for(torch.empty(s)) for s in P._gemms(runner)} == {cut}
    timed = []

    def fake(model, ids, cache, shapes, rows):  # the extension faster up to 4 tokens, oneDNN's from 8
        timed.append(ids.shape[1])
        return (1.0 if ids.shape[1] <= 4 else 3.0) if rows else 2.0

    monkeypatch.setattr(P, "_forward_ms", fake)
    assert P.measure_cut(runner) == 4 and max(timed) == 8  # the first loss ends the measuring
    assert FA.rows_for(runner.hf.model.layers[0].mlp.down_proj.weight) == 4

    def tie_first(model, ids, cache, shapes, rows):  # one row: both stream the same weights, 2% apart (a tie)
        n = ids.shape[1]
        return (2.04 if n == 1 else 1.0 if n <= 12 else 2.5) if rows else 2.0

    monkeypatch.setattr(P, "_forward_ms", tie_first)
    assert P.measure_cut(runner) == 12  # a tie at one row kept the extension; the loss at 16 (25%) ended it

    def lost_first(model, ids, cache, shapes, rows):
        return (2.2 if ids.shape[1] == 1 else 1.0) if rows else 2.0

    monkeypatch.setattr(P, "_forward_ms", lost_first)
    assert P.measure_cut(runner) == 0  # 10% slower at one row: a loss, whatever follows


@needs_kernel
def test_every_caller_reads_the_measured_cut():
    runner = fused_runner(LlamaForCausalLM(LlamaConfig(**SHAPE)))
    x, cos = torch.randn(4, 256, dtype=torch.bfloat16), torch.ones(4, 1, 32, dtype=torch.bfloat16)
    gate_up = runner.hf.model.layers[0].mlp.gate_proj.group.weight
    with torch.inference_mode():
        assert B.blocks(runner, x, cos) is not None and FA.linear(x, gate_up, None) is not None
        assert FA.exact_rows(gate_up) == FA.LINEAR_ROWS
        FA.set_cut(tuple(gate_up.shape), 2)
        assert FA.rows_for(gate_up) == 2 and FA.linear(x, gate_up, None) is None  # oneDNN's takes 4 rows
        assert FA.linear(x[:2], gate_up, None) is not None
        assert B.blocks(runner, x, cos) is None and B.blocks(runner, x[:2], cos[:2]) is not None
        assert FA.exact_rows(gate_up) == 2 and "up to 2 tokens by weight" in FA.describe()
        logits = runner(input_ids=torch.randint(1, 300, (1, 6))).logits  # a forward past the cut runs per op
        assert logits.shape == (1, 6, 300) and torch.isfinite(logits.float()).all()


@needs_kernel
def test_calibrate_measures_a_model_once_and_says_so(monkeypatch):
    runner = fused_runner(LlamaForCausalLM(LlamaConfig(**SHAPE)))
    measured = []

    def fake(model):
        measured.append(model)
        for shape in P._gemms(model):
            FA.set_cut(shape, 8)
        return 8

    monkeypatch.setattr(P, "measure_cut", fake)
    # q/k/v fused (256 + 2 x 64 rows), o_proj, gate/up fused, down_proj, the output layer
    assert sorted(P._gemms(runner)) == [(256, 256), (256, 512), (300, 256), (384, 256), (1024, 256)]
    said = P.calibrate(runner)
    assert said == "the extension's GEMM up to 8 tokens a forward (measured against oneDNN's here)"
    assert P.calibrate(runner) == said and len(measured) == 1  # measured once a process
    assert P.calibrate(runner.hf) == ""  # not Phoenix's runner: its weights keep LINEAR_ROWS


def test_fp32_is_never_measured():
    from engine.decode.runner import Runner

    runner = Runner(LlamaForCausalLM(LlamaConfig(**SHAPE)).eval())
    assert P._gemms(runner) == [] and P.calibrate(runner) == ""


@pytest.mark.real  # loads the 135M-parameter target
@pytest.mark.skipif(
    not __import__("engine.catalog", fromlist=["present"]).present("smollm2"),
    reason="the real pair is not fetched here (python -m engine zoo fetch smollm2); CI does not need it",
)
def test_the_real_pair_records_its_cuts():
    from engine.decode.loading import load_pair, prepare

    pair = prepare(load_pair("smollm2", None, "cpu", "bfloat16"))
    if FA.extension() is None:
        pytest.skip("no decode extension here")
    assert "the extension's GEMM up to" in pair.packed and "measured against oneDNN's here" in pair.packed
