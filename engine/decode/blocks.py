"""A decoder layer's two halves as one call each, for a bf16 step of a few tokens on the CPU (the decode extension's
``qkv_block`` and ``mlp_block``): the norm, the fused q/k/v projection and the rotary embedding; the norm, the fused
gate/up projection, the activation, the down projection and the residual. They run the ops Phoenix's runner would
call one by one, in its order, so a token's result is the same to the bit; what they save is the interpreter between
them. SmolLM2's one-row bf16 step spent about 4 of its 16.5 ms outside its GEMMs and attention, in about twenty
Python-level calls a layer (AMD EPYC Zen 4, 2 threads, 2026-12-06).

Only where the runner's own path is that sequence: a family with pre-norms, no q/k norm, no Granite multipliers, the
rotary over the whole head, q/k/v and gate/up fused (engine.decode.packed), the extension built, no gradient. Every
other forward, and any forward of more tokens than its weights' cuts (``fast_attention.rows_for``: up to LINEAR_ROWS,
less where oneDNN's GEMM measured faster on this CPU), runs the runner's per-op path."""

from __future__ import annotations

import torch

from engine.decode import fast_attention
from engine.decode.packed import Fused, group_of


class Block:
    """One layer's weights for the two calls; the fused groups are read at each call, as the runner reads them."""

    def __init__(self, layer, qkv: Fused, gate_up: Fused, runner):
        self.module = fast_attention.extension()
        self.layer, self.qkv_group, self.gate_up = layer, qkv, gate_up
        self.eps, self.heads, self.kv_heads, self.head_dim = runner.eps, runner.heads, runner.kv_heads, runner.head_dim

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q and k rotated, and v, for ``x`` [N, H] (q [N, heads, d], k and v [N, KV heads, d])."""
        group = self.qkv_group
        bias = fast_attention.NO_BIAS if group.bias is None else group.bias
        norm = self.layer.input_layernorm.weight
        return self.module.qkv_block(x, norm, self.eps, group.weight, bias, cos, sin, self.heads, self.kv_heads)

    def rows(self) -> int:
        """Tokens up to which the extension's GEMM takes each of this layer's weights (their measured cuts)."""
        weights = (self.qkv_group.weight, self.gate_up.weight, self.layer.mlp.down_proj.weight)
        return min(fast_attention.rows_for(w) for w in weights)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` plus its MLP's output."""
        norm = self.layer.post_attention_layernorm.weight
        down = self.layer.mlp.down_proj.weight
        return self.module.mlp_block(x, norm, self.eps, self.gate_up.weight, down, fast_attention.NO_BIAS)


def blocks(runner, x: torch.Tensor, cos: torch.Tensor) -> list[Block | None] | None:
    """Each layer's ``Block`` for this forward, or None where the runner's per-op path runs it (built once per
    runner, on its first forward that can use them: the groups are fused after the runner is made)."""
    if len(x) > fast_attention.LINEAR_ROWS or not fast_attention.cpu_bf16(x) or torch.is_grad_enabled():
        return None
    if cos.shape[-1] != runner.head_dim or cos.dtype != torch.bfloat16 or not x.is_contiguous():
        return None
    built = runner.__dict__.get("_blocks")
    if built is None:
        built = runner.__dict__["_blocks"] = _build(runner)
    first = next((b for b in built if b is not None), None)
    if first is None or len(x) > first.rows():  # beyond a weight's cut oneDNN's GEMM is faster: per op
        return None
    return built


def _build(runner) -> list[Block | None]:
    """A block for every layer the extension can run whole; [] where it runs none."""
    s = runner.shape
    if fast_attention.extension() is None or s.post_norm or s.qk_norm or s.fused or s.residual_multiplier != 1.0:
        return []
    if runner.compiled or runner.head_dim % 32 or runner.hf.config.hidden_size % 32:
        return []
    out: list[Block | None] = []
    for layer in runner.hf.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        qkv, gate_up = group_of(attn.q_proj, attn.k_proj, attn.v_proj), group_of(mlp.gate_proj, mlp.up_proj)
        weights = [layer.input_layernorm.weight, layer.post_attention_layernorm.weight, mlp.down_proj.weight]
        if qkv is None or gate_up is None or gate_up.sizes[0] != gate_up.sizes[1] or mlp.down_proj.bias is not None:
            out.append(None)
            continue
        ok = mlp.down_proj.weight.shape[1] % 32 == 0 and _plain(qkv) and _plain(gate_up)
        ok = ok and all(fast_attention.cpu_bf16(w) and w.is_contiguous() for w in weights)
        out.append(Block(layer, qkv, gate_up, runner) if ok else None)
    return out if any(b is not None for b in out) else []


def _plain(group: Fused) -> bool:
    w, b = group.weight, group.bias
    bias_ok = b is None or (b.dtype == w.dtype and b.is_contiguous())
    return fast_attention.cpu_bf16(w) and w.is_contiguous() and bias_ok
