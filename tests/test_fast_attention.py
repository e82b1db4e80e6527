"""Phoenix's decode attention kernel (engine.decode.fast_attention): on a CPU with AVX-512 BF16 it gives SDPA's
attention within bf16's own rounding, over strided cache views, masks per row and token, and grouped query heads;
the runner takes it for a bf16 step of a few query rows and SDPA otherwise; fp32 never takes it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from engine.decode import fast_attention as FA
from engine.decode.runner import Runner

op = FA.kernel()
needs_kernel = pytest.mark.skipif(op is None, reason=f"no decode kernel here: {FA.describe()}")


def cache_view(B: int, KV: int, S: int, d: int, gen) -> torch.Tensor:
    """[B, KV, S, d] bf16 as the server's cache holds it: a view of a buffer with spare columns."""
    return (torch.randn(B, KV, S + 24, d, generator=gen) * 2).bfloat16()[:, :, :S]


@needs_kernel
@pytest.mark.parametrize("B,KV,R,n,S,d", [(1, 3, 3, 1, 37, 64), (5, 3, 6, 2, 300, 64), (4, 2, 8, 1, 129, 128)])
def test_the_kernel_gives_sdpas_attention_within_bf16s_rounding(B, KV, R, n, S, d):
    gen = torch.Generator().manual_seed(B * S)
    q = torch.randn(B, KV, R, d, generator=gen).bfloat16()
    k, v = cache_view(B, KV, S, d, gen), cache_view(B, KV, S, d, gen)
    mask = torch.rand(B, 1, n, S, generator=gen) > 0.3  # padding holes, a row's own columns always seen
    mask[..., -n:] = torch.tril(torch.ones(n, n, dtype=torch.bool))
    rows = mask.repeat(1, 1, R // n, 1)  # query row r reads token r % n's mask row
    exact = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=rows, scale=0.125)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=rows, scale=0.125)
    ours = FA.attend(q, k, v, mask, 0.125)
    assert ours is not None and ours.dtype == torch.bfloat16 and ours.shape == q.shape
    worst = (sdpa.float() - exact).abs().max().item()
    assert (ours.float() - exact).abs().max().item() <= worst + 1e-3
    unmasked = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=0.125)
    assert (FA.attend(q, k, v, None, 0.125).float() - unmasked).abs().max().item() < 0.05


@needs_kernel
@pytest.mark.parametrize("d", [64, 128, 96])
def test_the_kernel_reads_only_the_columns_a_row_attends_to(d):
    """A row that joined the batch short keeps a masked stretch as wide as the widest row was (engine.decode.batch):
    the kernel skips every block of sixteen columns no query row of that row attends to. Garbage there (NaN, as an
    unread buffer may hold) changes no bit of the answer: the same as zeros there."""
    gen = torch.Generator().manual_seed(d)
    B, KV, R, n, S = 3, 2, 4, 2, 200
    q = torch.randn(B, KV, R, d, generator=gen).bfloat16()
    k, v = cache_view(B, KV, S, d, gen), cache_view(B, KV, S, d, gen)
    mask = torch.ones(B, 1, n, S, dtype=torch.bool)
    mask[0, ..., 40:150] = False  # row 0 joined at 40 columns when the widest had 150
    mask[1, ..., 5:9] = False  # a few rejected drafts' columns: its blocks stay live
    mask[..., -n:] = torch.tril(torch.ones(n, n, dtype=torch.bool))
    clean = FA.attend(q, k, v, mask, 0.125)
    dead = slice(48, 144)  # the whole blocks inside row 0's stretch
    k[0, :, dead], v[0, :, dead] = float("nan"), float("nan")
    dirty = FA.attend(q, k, v, mask, 0.125)
    assert clean is not None and dirty is not None and torch.isfinite(dirty.float()).all()
    assert torch.equal(dirty, clean)
    rows = mask.repeat(1, 1, R // n, 1)
    k[0, :, dead], v[0, :, dead] = 0.0, 0.0
    sdpa = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=rows, scale=0.125)
    assert (dirty.float() - sdpa).abs().max().item() < 0.05


@needs_kernel
@pytest.mark.parametrize("d", [64, 128])
def test_a_query_rows_attention_is_the_same_bits_alone_or_among_others(d):
    """A step's token among more query rows (more heads a KV head, a verify's k + 1 tokens) must get the bits it gets
    alone, or greedy bf16 speculation could pick another token than a plain step: the scores are one sum over d in
    one order per row (AMX's tiles where the CPU has them, else AVX-512), whatever R."""
    gen = torch.Generator().manual_seed(d)
    B, KV, R, S = 2, 2, 8, 181
    q = torch.randn(B, KV, R, d, generator=gen).bfloat16()
    k, v = cache_view(B, KV, S, d, gen), cache_view(B, KV, S, d, gen)
    mask = torch.rand(B, 1, 1, S, generator=gen) > 0.2
    mask[..., -1] = True
    together = FA.attend(q, k, v, mask, 0.125)
    assert together is not None
    for r in range(R):
        alone = FA.attend(q[:, :, r : r + 1].contiguous(), k, v, mask, 0.125)
        assert alone is not None and torch.equal(alone, together[:, :, r : r + 1]), r
    three = FA.attend(q[:, :, 2:5].contiguous(), k, v, mask, 0.125)
    assert three is not None and torch.equal(three, together[:, :, 2:5])


def test_the_kernel_leaves_long_queries_fp32_and_odd_heads_to_sdpa():
    q, k = torch.zeros(1, 2, FA.ROWS + 1, 64).bfloat16(), torch.zeros(1, 2, 10, 64).bfloat16()
    assert FA.attend(q, k, k, None, 1.0) is None  # a prompt's many rows: SDPA's tiles win
    assert FA.attend(q[:, :, :2].float(), k.float(), k.float(), None, 1.0) is None  # fp32: SDPA, the exact path
    assert FA.attend(torch.zeros(1, 2, 2, 48).bfloat16(), k[..., :48], k[..., :48], None, 1.0) is None
    assert FA.describe("float32").startswith("SDPA (float32")


def test_an_opt_out_or_a_cpu_without_avx512_bf16_runs_sdpa_and_says_why(monkeypatch):
    monkeypatch.setenv("PHOENIX_DECODE_ATTENTION", "sdpa")
    assert FA._build() == (None, "PHOENIX_DECODE_ATTENTION=sdpa")
    monkeypatch.delenv("PHOENIX_DECODE_ATTENTION")
    monkeypatch.setattr(FA, "_cpu_flags", lambda: {"avx2"})
    assert FA._build() == (None, "this CPU has no AVX-512 BF16")


@needs_kernel
def test_a_bf16_runner_step_through_the_kernel_keeps_sdpas_logits(monkeypatch):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256)  # fmt: skip
    runner = Runner(LlamaForCausalLM(config).eval().to(torch.bfloat16))
    prompt, steps = torch.randint(1, 300, (1, 40)), [torch.tensor([[7]]), torch.tensor([[3, 9]]), torch.tensor([[5]])]

    def logits() -> list[torch.Tensor]:
        cache, out = DynamicCache(config=config), []
        with torch.inference_mode():
            runner(input_ids=prompt, cache=cache, use_cache=True)
            for ids in steps:  # 4 and 8 grouped rows: the kernel's
                out.append(runner(input_ids=ids, cache=cache, use_cache=True).logits.float())
        return out

    calls: list[int] = []
    real = FA.attend
    monkeypatch.setattr(FA, "attend", lambda *a: calls.append(a[0].shape[2]) or real(*a))
    fast = logits()
    assert sorted(set(calls)) == [4, 8]  # the prompt, on an empty cache, went to SDPA's causal path
    monkeypatch.setattr(FA, "attend", lambda *a: None)
    sdpa = logits()
    for a, b in zip(fast, sdpa):  # a random model's logits are near ties: the argmax may move, a logit by bf16's step
        assert (a - b).abs().max().item() < 0.05


@needs_kernel
def test_the_one_call_norm_and_rope_give_torchs_bits_and_leave_what_they_cannot_take_to_torch():
    """The extension's RMSNorm and RoPE (one call each instead of six to eight torch ops): RoPE the same bits as the
    runner's torch ops, on a strided view of a fused projection too; RMSNorm within one bf16 step of them (its sum
    of squares adds in another order); fp32, partial rotary and odd widths go to the torch version."""
    from engine.decode.runner import rms_norm, rotate

    norm, rope = FA.rms_norm(rms_norm), FA.rotate(rotate)
    gen = torch.Generator().manual_seed(3)
    with torch.inference_mode():
        for n in (1, 8, 37):
            x, w = (torch.randn(n, 576, generator=gen) * 3).bfloat16(), torch.randn(576, generator=gen).bfloat16()
            want, got = rms_norm(x, w, 1e-5).float(), norm(x, w, 1e-5).float()
            assert ((want - got).abs() <= want.abs() * 2**-7).all()
            fused = torch.randn(n, 960, generator=gen).bfloat16()
            q = fused[:, :576].view(n, 9, 64)  # not contiguous: a slice of q, k, v's one GEMM
            angles = torch.randn(n, 64, generator=gen)
            cos, sin = angles.cos().bfloat16()[:, None, :], angles.sin().bfloat16()[:, None, :]
            assert torch.equal(rope(q, cos, sin), rotate(q, cos, sin))
        x32 = torch.randn(4, 576)
        assert torch.equal(norm(x32, torch.ones(576), 1e-5), rms_norm(x32, torch.ones(576), 1e-5))
        half = torch.randn(4, 1, 32).bfloat16()  # rotary over half the head (Phi3's partial rotary): torch's
        q = torch.randn(4, 2, 64).bfloat16()
        assert torch.equal(rope(q, half, half), rotate(q, half, half))


@needs_kernel
def test_the_few_row_gemm_gives_oneDNNs_product_within_bf16_rounding_each_row_as_if_alone():
    """The extension's GEMM for a forward of up to sixteen tokens (eight rows a pass over each weight block): the
    product and bias within one bf16 step of oneDNN's packed GEMM, each row the same bits alone or beside others
    (in the first pass or the second), and every call it cannot take (seventeen rows, fp32, a width that is not a
    multiple of 32) left to the layer."""
    gen = torch.Generator().manual_seed(5)
    w = (torch.randn(200, 576, generator=gen) * 0.05).bfloat16()
    b = (torch.randn(200, generator=gen) * 0.1).bfloat16()
    packed = torch.ops.mkldnn._reorder_linear_weight(w, 16)
    with torch.inference_mode():
        for rows in (8, 13, FA.LINEAR_ROWS):
            x = torch.randn(rows, 576, generator=gen).bfloat16()
            got = FA.linear(x, w, b)
            want = torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], "")
            assert got is not None and got.shape == (rows, 200)
            assert ((got.float() - want.float()).abs() <= want.float().abs() * 2**-7 + 1e-3).all()
            for i in (0, 3, 7, rows - 1):
                alone = FA.linear(x[i : i + 1], w, b)
                assert alone is not None and torch.equal(alone[0], got[i])
        assert FA.linear(torch.randn(FA.LINEAR_ROWS + 1, 576).bfloat16(), w, b) is None
    with torch.enable_grad():  # training (the head's): the op has no backward, so the layer computes
        assert FA.linear(x[:1], w.clone().requires_grad_(), None) is None
        assert FA.linear(torch.randn(1, 576), w.float(), None) is None
        assert FA.linear(torch.randn(1, 40).bfloat16(), torch.randn(8, 40).bfloat16(), None) is None


@needs_kernel
def test_the_amx_gemm_takes_two_to_sixteen_tokens_each_row_the_same_bits_at_any_count():
    """Where the CPU has AMX, 2 to 16 tokens go through its tiles, the weight read as stored: the product within
    one bf16 step of oneDNN's, and a row's bits the same at every count the tiles take (one K order for any M)."""
    if not getattr(FA.extension(), "amx", False):
        pytest.skip("no AMX on this CPU (the AVX-512 GEMM above takes every count)")
    gen = torch.Generator().manual_seed(6)
    w = (torch.randn(960, 576, generator=gen) * 0.05).bfloat16()  # SmolLM2's fused q, k, v
    b = (torch.randn(960, generator=gen) * 0.1).bfloat16()
    with torch.inference_mode():
        for rows in (2, 5, 16):
            x = torch.randn(rows, 576, generator=gen).bfloat16()
            got = FA.linear(x, w, b)
            want = torch.nn.functional.linear(x, w, b)
            assert got is not None and ((got.float() - want.float()).abs() <= want.float().abs() * 2**-7 + 1e-3).all()
            for i in (0, rows - 1):
                pair = FA.linear(x[[i, 0]], w, b)
                assert pair is not None and torch.equal(pair[0], got[i])


def test_a_fused_groups_layers_keep_their_own_weights_as_rows_of_the_groups():
    """Fusing makes each layer's weight a view of the group's plain weight (no second copy for the few-row GEMM):
    the state dict's values are what they were."""
    from engine.decode.packed import fuse, pack

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2)).bfloat16()  # fmt: skip
    before = {k: v.clone() for k, v in model.state_dict().items()}
    if pack(model, "on").startswith("off"):
        pytest.skip("no oneDNN bf16 packing on this CPU")
    fuse(model)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    attn = model.model.layers[0].self_attn
    if hasattr(attn.q_proj, "group"):
        group = attn.q_proj.group
        assert attn.k_proj.weight.data_ptr() == group.weight[attn.q_proj.out_features :].data_ptr()
