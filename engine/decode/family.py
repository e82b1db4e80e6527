"""What makes each family's forward its own in Phoenix's runner (engine.decode.runner), as data (``Shape``), and
the elementwise steps every family shares, op for op as transformers computes them (its modeling is the reference:
tests/test_runner.py holds the runner to it in fp32)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "granite", "olmo2", "phi3")


@dataclass(frozen=True)
class Shape:
    """What makes a family's forward its own, read from its config (transformers' modeling of each is the
    reference: tests/test_runner.py holds the runner to it, logits and hidden states, in fp32)."""

    post_norm: bool = False  # OLMo2: the norm after each block's output, none before it
    qk_norm: str | None = None  # "head" (Qwen3: per head), "full" (OLMo2: over the whole projection)
    weight_first: bool = False  # OLMo2's RMSNorm multiplies by its weight before casting back
    fused: bool = False  # Phi3: one qkv_proj and one gate_up_proj
    embedding_multiplier: float = 1.0  # Granite's four multipliers
    residual_multiplier: float = 1.0
    attention_multiplier: float | None = None  # the attention's scale where it is not head_dim ** -0.5
    logits_scaling: float = 1.0


def shape_of(config) -> Shape:
    kind = config.model_type
    if kind == "granite":
        return Shape(
            embedding_multiplier=float(config.embedding_multiplier),
            residual_multiplier=float(config.residual_multiplier),
            attention_multiplier=float(config.attention_multiplier),
            logits_scaling=float(config.logits_scaling),
        )
    if kind == "olmo2":
        return Shape(post_norm=True, qk_norm="full", weight_first=True)
    return Shape(qk_norm="head" if kind == "qwen3" else None, fused=kind == "phi3")


def unsupported(model) -> str | None:
    """None where the runner can run ``model``; else why not, in a few words."""
    c = model.config
    if c.model_type not in FAMILIES:
        return f"{c.model_type} has no Phoenix runner (it runs {', '.join(FAMILIES)})"
    if getattr(c, "sliding_window", None) and getattr(c, "use_sliding_window", True):
        return "sliding-window attention"
    if any(t != "full_attention" for t in (getattr(c, "layer_types", None) or [])):
        return "layers that are not full attention"
    if getattr(c, "hidden_act", "silu") != "silu":
        return f"activation {c.hidden_act}"
    if getattr(c, "mlp_bias", False):
        return "MLP biases"
    return None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm, op for op: in float32, then back."""
    dtype = x.dtype
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def rms_norm_weight_first(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """OLMo2's RMSNorm: the weight multiplies in float32, then the cast (bf16 rounds once, not twice)."""
    dtype = x.dtype
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * x32).to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE in transformers' rotate-half layout; ``x`` [N, heads, d], ``cos``/``sin`` [N, 1, r]: the first r of d
    dimensions turn (partial rotary, Phi3's ``partial_rotary_factor``), the rest pass as they are."""
    r = cos.shape[-1]
    if r < x.shape[-1]:
        return torch.cat((rotate(x[..., :r], cos, sin), x[..., r:]), dim=-1)
    half = r // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos) + (turned * sin)


def gated(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up
