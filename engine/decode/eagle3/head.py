"""An EAGLE-3 draft head: one Llama layer that drafts from the target's own hidden states.

The checkpoint is the one vLLM's ``Eagle3LlamaForCausalLM`` and SGLang's EAGLE3 load: ``config.json`` with
``architectures: ["LlamaForCausalLMEagle3"]`` and ``draft_vocab_size``, and safetensors holding ``fc``,
``midlayer.*``, ``norm``, ``lm_head``, ``d2t`` (offsets: target id = i + d2t[i]) and ``t2d`` (a mask over the
target vocabulary). The embedding is the target's and is not saved. A head from the HF cache loads unchanged.

Layer arithmetic follows vLLM's ``llama_eagle3.py``: the three taps go through ``fc``; the layer concatenates
``input_layernorm(embed(token))`` with ``hidden_norm(h)`` so q/k/v take 2H inputs; the residual is ``h``; the final
``norm`` gives the state the output layer reads, and the pre-norm state is fed back as the next step's ``h``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from engine.decode.packed import project
from engine.errors import PhoenixError

ARCHITECTURE = "LlamaForCausalLMEagle3"


def default_taps(num_layers: int) -> tuple[int, int, int]:
    """vLLM's default auxiliary layers; each is Hugging Face's ``hidden_states[i]`` (the input to layer i). Clamped
    into range for targets of fewer than five layers (the tiny test models)."""
    return (min(2, num_layers), num_layers // 2, max(num_layers - 3, 0))


@dataclass
class HeadConfig:
    """The fields of an EAGLE-3 config.json that shape the head (a Llama config with one layer)."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int  # the target's vocabulary
    draft_vocab_size: int  # rows of the head's own output layer
    target_hidden_size: int
    taps: tuple[int, ...] = ()  # target layers read; empty = default_taps of the target
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 8192
    rope_scaling: dict | None = None
    extra: dict = field(default_factory=dict)  # other config.json keys, kept on a round trip

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_json(self, dtype: str) -> dict:
        out = {
            **self.extra,
            "architectures": [ARCHITECTURE],
            "model_type": "llama",
            "num_hidden_layers": 1,
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "target_hidden_size": self.target_hidden_size,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "torch_dtype": dtype,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(self.taps), "use_aux_hidden_state": True},
        }
        if self.rope_scaling:
            out["rope_scaling"] = self.rope_scaling
        return out

    @classmethod
    def from_json(cls, cfg: dict, where: str) -> HeadConfig:
        if not isinstance(cfg, dict):
            raise PhoenixError(f"{where}: config.json holds a {type(cfg).__name__}, not an object; re-export the head")
        for name in ("eagle_config", "rope_scaling"):  # as a string or a list they were tracebacks
            if cfg.get(name) is not None and not isinstance(cfg[name], dict):
                raise PhoenixError(f"{where}: config.json's {name} must be an object, got {type(cfg[name]).__name__}")
        if cfg.get("num_hidden_layers", 1) != 1:
            raise PhoenixError(
                f"{where}: an EAGLE-3 head has one layer, config.json says {cfg.get('num_hidden_layers')}"
            )
        known = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
        missing = [k for k in known if not isinstance(cfg.get(k), int)]
        if missing:
            raise PhoenixError(f"{where}: config.json lacks {', '.join(missing)}; it is not an EAGLE-3 head")
        taps = tuple((cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or ())
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in taps):
            raise PhoenixError(f"{where}: eagle_aux_hidden_state_layer_ids must be layer numbers, got {list(taps)}")
        named = {
            "num_hidden_layers",
            "architectures",
            "model_type",
            "eagle_config",
            "torch_dtype",
            "hidden_act",
            "tie_word_embeddings",
            "num_key_value_heads",
            "draft_vocab_size",
            "target_hidden_size",
            "rms_norm_eps",
            "rope_theta",
            "max_position_embeddings",
            "rope_scaling",
            *known,
        }
        return cls(
            cfg["hidden_size"],
            cfg["num_attention_heads"],
            cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
            cfg["intermediate_size"],
            cfg["vocab_size"],
            cfg.get("draft_vocab_size") or cfg["vocab_size"],
            cfg.get("target_hidden_size") or cfg["hidden_size"],
            taps,
            float(cfg.get("rms_norm_eps", 1e-5)),
            float(cfg.get("rope_theta", 10000.0)),
            int(cfg.get("max_position_embeddings", 8192)),
            cfg.get("rope_scaling"),
            {k: v for k, v in cfg.items() if k not in named},
        )


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class Attention(nn.Module):
    def __init__(self, c: HeadConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(2 * c.hidden_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * c.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * c.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, c.hidden_size, bias=False)


class MLP(nn.Module):
    def __init__(self, c: HeadConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return project(self.down_proj, F.silu(project(self.gate_proj, x)) * project(self.up_proj, x))


class MidLayer(nn.Module):
    def __init__(self, c: HeadConfig):
        super().__init__()
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)


class Eagle3Head(nn.Module):
    def __init__(self, c: HeadConfig):
        super().__init__()
        self.config = c
        self.fc = nn.Linear(3 * c.target_hidden_size, c.hidden_size, bias=False)
        self.midlayer = MidLayer(c)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(c.draft_vocab_size, dtype=torch.long))
        self.register_buffer(
            "t2d",
            torch.ones(c.vocab_size, dtype=torch.bool)
            if c.draft_vocab_size == c.vocab_size
            else torch.zeros(c.vocab_size, dtype=torch.bool),
        )
        self.rotary = _rotary(c)

    def qkv(self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor):
        """q [B, heads, T, d], k and v [B, kv_heads, T, d], RoPE applied at ``positions`` [B, T]."""
        layer = self.midlayer
        x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)
        attn = layer.self_attn
        B, T, _ = x.shape
        q = project(attn.q_proj, x).view(B, T, attn.heads, attn.head_dim).transpose(1, 2)
        k = project(attn.k_proj, x).view(B, T, attn.kv_heads, attn.head_dim).transpose(1, 2)
        v = project(attn.v_proj, x).view(B, T, attn.kv_heads, attn.head_dim).transpose(1, 2)
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        cos, sin = self.rotary(v, positions)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return q, k, v

    def after_attention(self, attn_out: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """o_proj, residual, MLP: the pre-norm state ([B, T, heads, d] in, [B, T, H] out)."""
        layer = self.midlayer
        B, T = attn_out.shape[:2]
        h = project(layer.self_attn.o_proj, attn_out.reshape(B, T, -1)) + hidden
        return layer.mlp(layer.post_attention_layernorm(h)) + h

    def logits(self, prenorm: torch.Tensor) -> torch.Tensor:
        return project(self.lm_head, self.norm(prenorm))

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.get_buffer("d2t")[draft_ids]

    def step(
        self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, cache: HeadCache
    ) -> torch.Tensor:
        """New positions on top of ``cache`` (batch 1): their pre-norm states. ``hidden`` is H wide (fc already
        applied to taps, or fed back)."""
        q, k, v = self.qkv(embeds, hidden, positions)
        keys, values = cache.append(k, v)
        T, S = q.shape[2], keys.shape[2]
        mask = None
        if T > 1:  # causal among the new positions, everything cached before them visible
            mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
        return self.after_attention(out.transpose(1, 2), hidden)


class HeadCache:
    """The head's own small KV cache (one layer): appended to while drafting, cropped like any other."""

    def __init__(self):
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def crop(self, length: int) -> None:
        if self.k is not None and self.v is not None and length < self.length:
            self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]


def _rotary(c: HeadConfig):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    # transformers 5 reads rope_parameters; a checkpoint's rope_scaling (llama3, yarn, ...) goes in the same dict
    kw: dict[str, Any] = {
        "rope_parameters": {"rope_type": "default", "rope_theta": c.rope_theta, **(c.rope_scaling or {})}
    }
    llama = LlamaConfig(
        hidden_size=c.hidden_size,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads,
        max_position_embeddings=c.max_position_embeddings,
        **kw,
    )
    return LlamaRotaryEmbedding(config=llama)


def head_config_for(
    target_config, draft_vocab_size: int, taps: tuple[int, ...] | None = None, intermediate_size: int = 0
) -> HeadConfig:
    """A head shaped like one layer of ``target_config`` (a transformers config); its MLP ``intermediate_size``
    wide where given (vLLM reads the width from the head's config)."""
    c = target_config.get_text_config() if hasattr(target_config, "get_text_config") else target_config
    rope = getattr(c, "rope_parameters", None) or {}
    theta = rope.get("rope_theta") or getattr(c, "rope_theta", None) or 10000.0
    return HeadConfig(
        c.hidden_size,
        c.num_attention_heads,
        c.num_key_value_heads or c.num_attention_heads,
        intermediate_size or c.intermediate_size,
        c.vocab_size,
        draft_vocab_size,
        c.hidden_size,
        tuple(taps or default_taps(c.num_hidden_layers)),
        float(getattr(c, "rms_norm_eps", 1e-5)),
        float(theta),
        int(getattr(c, "max_position_embeddings", 8192)),
    )
