"""Phoenix's own forward for the Llama family and its near kin (Llama, SmolLM2, Mistral, Qwen2 / Qwen2.5, Qwen3,
Granite, OLMo2, Phi3), in gpt-fast's style: a few plain tensor steps over the model's own weights, no per-layer
plumbing. What differs between them is data (``Shape``, engine.decode.family): where the norms sit, a norm on the
queries and keys (per head or over the whole projection), fused projections, partial rotary, and Granite's
multipliers.

What it does that transformers' modeling does not, for a decode step or a batched verify on the CPU:
- the batch's tokens are flattened: the linear layers see only real tokens ([N, H]), never a padding row (a verify
  of rows with different k pads the short ones; prompts prefilled together are padded too);
- one mask and one rotary table per forward, shared by every layer, instead of one per layer;
- several calls in one forward (``forward_parts``: a prompt's chunk beside a batch's verify, vLLM V1's mixed step),
  the linear layers over all their tokens at once, attention per call over its own cache;
- RMSNorm, rotary and SiLU-gated MLP as small functions that ``compile_ops`` fuses with torch.compile (inductor);
- the linear layers are the model's own modules, so prepacked ones (engine.decode.packed) are used as they are (a
  bf16 forward of up to sixteen tokens takes the decode extension's GEMM instead, each layer's two halves one call
  each: engine.decode.fast_attention.linear, engine.decode.blocks);
- the token count the linear layers see is rounded up to a bucket (``bucket``: itself up to 8, or up to 16 where the
  extension's GEMM takes them, then steps of about 1.5x, then of 16): oneDNN builds a kernel per shape (0.7-0.9 ms
  each, the first time), and ``warm`` runs every bucket before the server says ready. The extra rows are zeros
  whose results are dropped; a packed GEMM's rows do not depend on the batch, so real tokens' results keep their bits.
Attention reads the cache transformers' ``DynamicCache`` holds, so every caller (the single-stream loop, the batched
rows of engine.decode.batch with their valid columns, the prefix cache) keeps its cache as is.

``Runner`` stands where the model stood: it answers the same call (``input_ids``, ``cache``, ``attention_mask``,
``position_ids``, ``logits_to_keep``, ``output_hidden_states``) and hands every other attribute to the model.
transformers' modeling stays the reference, and any architecture not listed here runs there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers.cache_utils import DynamicCache, DynamicLayer

from engine.decode import fast_attention
from engine.decode.blocks import Block, blocks
from engine.decode.family import gated, rms_norm, rms_norm_weight_first, rotate, shape_of, unsupported
from engine.decode.flat import Part, States, causal_mask, fresh_rows, grow, pad, take
from engine.decode.packed import project, project_all


@dataclass
class Output:
    logits: torch.Tensor
    hidden_states: Sequence[torch.Tensor] | None  # engine.decode.flat.States: each padded when read
    cache: Any


class Runner(nn.Module):
    """The model's forward, flattened; ``Runner(model)`` is called as the model is. ``compile_ops`` fuses the
    elementwise steps with torch.compile (dynamic shapes: one graph per function serves every token count)."""

    def __init__(self, model, compile_ops: bool = False):
        super().__init__()
        why = unsupported(model)
        if why is not None:
            raise ValueError(f"Phoenix's runner cannot run this model: {why}")
        self.hf, c = model, model.config
        self.eps, self.compiled = float(c.rms_norm_eps), compile_ops
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads or c.num_attention_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.shape = shape_of(c)
        self.scale = self.shape.attention_multiplier or self.head_dim**-0.5
        norm = rms_norm_weight_first if self.shape.weight_first else rms_norm
        # eager bf16 steps take the extension's one-call norm and RoPE (engine.decode.fast_attention)
        self.norm = fast_attention.rms_norm(norm) if norm is rms_norm else norm
        self.rope, self.mlp_act = fast_attention.rotate(rotate), gated
        if compile_ops:
            self.norm, self.rope, self.mlp_act = (
                torch.compile(f, dynamic=True, fullgraph=True) for f in (norm, rotate, gated)
            )

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["hf"], name)

    def forward(
        self,
        input_ids: torch.Tensor,
        cache=None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        logits_to_keep: int = 0,
        output_hidden_states: bool = False,
        use_cache: bool = True,
        **kwargs,
    ) -> Any:
        if not _growing(cache):  # a preallocated (static) cache is the compiled path's: transformers' forward runs it
            return self.hf(
                input_ids=input_ids,
                cache=cache,
                attention_mask=attention_mask,
                position_ids=position_ids,
                logits_to_keep=logits_to_keep,
                output_hidden_states=output_hidden_states,
                use_cache=use_cache,
                **kwargs,
            )
        call = dict(input_ids=input_ids, cache=cache, attention_mask=attention_mask, position_ids=position_ids)
        return self._run([dict(call, logits_to_keep=logits_to_keep)], output_hidden_states)[0]

    def forward_parts(self, calls: list[dict], output_hidden_states: bool = False) -> list[Output]:
        """Several calls' tokens in one forward, each ``forward``'s arguments on a growing cache of its own: the
        linear layers read the weights once for all of them (a prompt's chunk beside a batch's decode step, where
        two forwards read them twice), attention runs per call over its own cache. Each call's ``Output`` is what
        it would have been alone."""
        if not all(_growing(call.get("cache")) for call in calls):  # a static cache runs transformers' forward alone
            raise ValueError("forward_parts runs calls on growing caches only (DynamicCache layers)")
        return self._run(calls, output_hidden_states)

    def _run(self, calls: list[dict], output_hidden_states: bool) -> list[Output]:
        """``forward_parts`` on caches already known to grow (``forward`` checked its one)."""
        model = self.hf.model
        parts, ids, positions, real = [], [], [], 0
        for call in calls:
            part, tokens, at = self._part(real, **call)
            parts.append(part)
            ids.append(tokens)
            positions.append(at)
            real += part.real
        exact = fast_attention.exact_rows(model.embed_tokens.weight)  # 16 where the extension's GEMM runs, else 8
        x = grow(model.embed_tokens(_joined(ids)), bucket(real, exact))
        if self.shape.embedding_multiplier != 1.0:
            x = x * self.shape.embedding_multiplier
        cos, sin = model.rotary_emb(x, grow(_joined(positions), len(x))[None, :])
        cos, sin = cos[0][:, None, :], sin[0][:, None, :]  # [N, 1, d]
        hidden: list[torch.Tensor] = []
        whole = blocks(self, x, cos)  # a layer's halves as one call each where the extension runs them
        for i, layer in enumerate(model.layers):
            if output_hidden_states:
                hidden.append(x[:real])
            x = self._layer(layer, i, x, (cos, sin, parts), whole[i] if whole else None)
        x = self.norm(x, model.norm.weight, self.eps)[:real]
        if output_hidden_states:
            hidden.append(x)
        if len(parts) == 1:  # the common forward: its states are the forward's own, unsliced
            return [self._output(x, hidden, parts[0], output_hidden_states, whole=True)]
        return [self._output(x, hidden, p, output_hidden_states) for p in parts]

    def _part(self, start: int, input_ids, cache, attention_mask=None, position_ids=None, logits_to_keep=0):
        """A call's place in a forward: its ``Part``, and its real tokens' ids and positions, flattened."""
        B, n = input_ids.shape
        old = _cached(cache)
        device = input_ids.device
        if position_ids is None:
            position_ids = (old + torch.arange(n, device=device)).expand(B, n)
        keep = attention_mask[:, -n:].bool() if attention_mask is not None else None
        flat = None if keep is None or bool(keep.all()) else keep.reshape(-1).nonzero().squeeze(1)
        fresh = fresh_rows(keep, B, n) if old == 0 and n > 1 else None
        mask = causal_mask(attention_mask, B, n, old, device) if fresh is None else None
        part = Part(B, n, cache, mask, flat, fresh, B * n if flat is None else len(flat), logits_to_keep, start)
        return part, take(input_ids.reshape(-1), flat), take(position_ids.reshape(-1), flat)

    def _output(
        self, x: torch.Tensor, hidden: list[torch.Tensor], p: Part, states: bool, whole: bool = False
    ) -> Output:
        span = slice(p.start, p.start + p.real)
        logits = self._logits(x if whole else x[span], p.B, p.n, p.flat, p.keep)
        mine = hidden if whole else [h[span] for h in hidden]
        return Output(logits, States(mine, p.B, p.n, p.flat) if states else None, p.cache)

    def _layer(self, layer, i: int, x: torch.Tensor, attending: tuple, block: Block | None) -> torch.Tensor:
        """One decoder layer: attention then MLP, each a residual block with its norm where the family puts it."""
        cos, sin = attending[0], attending[1]
        if self.shape.post_norm:  # OLMo2: each block sees the stream as it is and its output is normed
            out = self._attention(layer, i, *self._qkv(layer.self_attn, x, cos, sin), *attending)
            x = x + self.norm(out, layer.post_attention_layernorm.weight, self.eps)
            return x + self.norm(self._mlp(layer, x), layer.post_feedforward_layernorm.weight, self.eps)
        if block is not None:
            x = x + self._attention(layer, i, *block.qkv(x, cos, sin), *attending)
            return block.mlp(x)
        h = self.norm(x, layer.input_layernorm.weight, self.eps)
        x = x + self._residual(self._attention(layer, i, *self._qkv(layer.self_attn, h, cos, sin), *attending))
        return x + self._residual(self._mlp(layer, self.norm(x, layer.post_attention_layernorm.weight, self.eps)))

    def _residual(self, out: torch.Tensor) -> torch.Tensor:
        m = self.shape.residual_multiplier  # Granite scales each block's output before it joins the stream
        return out * m if m != 1.0 else out

    def _qkv(self, attn, h: torch.Tensor, cos, sin) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.shape.fused:  # Phi3: queries, keys and values from one projection, in that order
            q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
            qkv = project(attn.qkv_proj, h)
            q, k, v = qkv[:, :q_size], qkv[:, q_size : q_size + kv_size], qkv[:, q_size + kv_size :]
        else:  # one GEMM where the layers are a packed group (engine.decode.packed.fuse)
            q, k, v = project_all((attn.q_proj, attn.k_proj, attn.v_proj), h)
        if self.shape.qk_norm == "full":  # OLMo2: over the whole projection, before the heads split
            q, k = self.norm(q, attn.q_norm.weight, self.eps), self.norm(k, attn.k_norm.weight, self.eps)
        q, k = q.view(-1, self.heads, self.head_dim), k.view(-1, self.kv_heads, self.head_dim)
        if self.shape.qk_norm == "head":  # Qwen3: per head
            q, k = self.norm(q, attn.q_norm.weight, self.eps), self.norm(k, attn.k_norm.weight, self.eps)
        return self.rope(q, cos, sin), self.rope(k, cos, sin), v.reshape(-1, self.kv_heads, self.head_dim)

    def _attention(self, layer, i: int, q, k, v, cos, sin, parts: list[Part]) -> torch.Tensor:
        """The attention block's output (before the residual) for the rotated q, k and v of the forward's rows,
        each call's over its own cache."""
        span = [slice(p.start, p.start + p.real) for p in parts]
        outs = [self._attend(i, q[s], k[s], v[s], p) for s, p in zip(span, parts)]
        return project(layer.self_attn.o_proj, grow(outs[0] if len(outs) == 1 else torch.cat(outs), len(q)))

    def _attend(self, i: int, q, k, v, p: Part) -> torch.Tensor:
        """One call's attention: its real tokens' q, k, v [real, heads, d] in, their outputs [real, H] out."""
        q, k, v = (pad(t.reshape(p.real, -1), p.B, p.n, p.flat).view(p.B, p.n, -1, self.head_dim) for t in (q, k, v))
        keys, values = p.cache.update(k.transpose(1, 2), v.transpose(1, 2), i)
        if p.fresh is not None:
            out = self._causal(q.transpose(1, 2), keys, values, p.fresh)
        else:
            out = self._sdpa(q.transpose(1, 2), keys, values, p.mask)
        return take(out.transpose(1, 2).reshape(p.B * p.n, -1), p.flat)

    def _sdpa(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask) -> torch.Tensor:
        """Attention of q [B, H, n, d] over the cache's [B, KV, S, d]. In bf16 and fp16 the query heads that share a
        KV head go in as one longer query ([B, KV, g·n, d]), with the mask's rows repeated for each: SDPA's
        ``enable_gqa`` path expands the KV heads on every call on the CPU, which cost 2.0 against 0.29 ms a layer at
        8 rows in bf16 (Zen 5), over half of a step. fp32 keeps ``enable_gqa``, the path its exactness is tested on
        (grouping there is no faster, and its sums round differently)."""
        B, H, n, d = q.shape
        g = H // self.kv_heads
        if g == 1 or q.dtype == torch.float32:
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=g > 1)
        grouped = q.reshape(B, self.kv_heads, g * n, d)  # head h shares KV head h // g: rows (j, t) in order
        fast = fast_attention.attend(grouped, keys, values, mask, self.scale)  # a decode step's few rows
        if fast is not None:
            return fast.view(B, H, n, d)
        rows = mask if mask is None else mask.repeat(1, 1, g, 1)
        out = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=rows, scale=self.scale)
        return out.view(B, H, n, d)

    def _causal(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """A prefill on an empty cache: each row's own last ``lengths[b]`` tokens attend causally (SDPA's
        ``is_causal``, no mask to build or read), so prompts prefilled together attend over their own columns only,
        not over the longest one's padding: two prompts of 100 and 250 tokens 365 -> 287 ms (SmolLM2 bf16, AMD EPYC
        Zen 4, 2 threads, 2026-12-06; the flash kernel's time was the same with a mask as without one)."""
        B, H, n, d = q.shape
        gqa = H != self.kv_heads

        def attend(b: int, L: int) -> torch.Tensor:
            rows = slice(b, b + 1), slice(None), slice(n - L, None)
            return F.scaled_dot_product_attention(
                q[rows], keys[rows], values[rows], is_causal=True, scale=self.scale, enable_gqa=gqa
            )

        if B == 1 and lengths[0] == n:
            return attend(0, n)
        out = q.new_zeros(q.shape)  # padding positions: dropped by the caller
        for b, L in enumerate(lengths):
            out[b : b + 1, :, n - L :] = attend(b, L)
        return out

    def _mlp(self, layer, h: torch.Tensor) -> torch.Tensor:
        mlp = layer.mlp
        if self.shape.fused:  # Phi3: gate and up from one projection
            gate, up = project(mlp.gate_up_proj, h).chunk(2, dim=-1)
        else:
            gate, up = project_all((mlp.gate_proj, mlp.up_proj), h)
        return project(mlp.down_proj, self.mlp_act(gate, up))

    def _logits(self, x: torch.Tensor, B: int, n: int, flat, keep: int) -> torch.Tensor:
        """Logits for the last ``keep`` positions of each row (0: every position), computed for real tokens only."""
        if not keep:
            return pad(self._head(x), B, n, flat)
        keep = min(keep, n)
        wanted = torch.arange(B, device=x.device)[:, None] * n + torch.arange(n - keep, n, device=x.device)
        if flat is None:
            return self._head(x.index_select(0, wanted.view(-1))).view(B, keep, -1)
        kept = (flat % n) >= n - keep  # the real tokens among the last ``keep`` columns
        slots = (flat[kept] // n) * keep + flat[kept] % n - (n - keep)
        return pad(self._head(x[kept]), B, keep, slots)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.hf.lm_head.weight
        logits = project(self.hf.lm_head, grow(x, bucket(len(x), fast_attention.exact_rows(weight))))[: len(x)]
        return logits / self.shape.logits_scaling if self.shape.logits_scaling != 1.0 else logits


def bucket(n: int, exact: int = 8) -> int:
    """The token count a forward's linear layers run at: n itself up to ``exact`` (8, or 16 where the decode
    extension's GEMM takes them: engine.decode.fast_attention.exact_rows), then the next of 12, 16, 24, 32, 48, 64
    (each step about 1.5x), then the next multiple of 16. A prompt's prefill is most of what a server computes under
    load, and 1.5x steps there padded a 160-token prefill to 192 (SmolLM2 bf16: 146 ms against 127 at its own
    length, 2-core Zen 4, 2026-12-06); steps of 16 waste at most 15 rows, and up to 512 tokens are 42 shapes."""
    if n <= max(8, exact):
        return n
    if n > 64:
        return -(-n // 16) * 16
    size = 8
    while size < n:
        size = size * 3 // 2 if size & (size - 1) == 0 else size * 4 // 3
    return size


def warm(model, tokens: int) -> list[int]:
    """Run every bucket up to ``tokens`` once through ``model`` (a Runner), on a throwaway cache, so no request pays
    for building a GEMM kernel; the buckets run."""
    sizes = sorted({bucket(n) for n in range(1, tokens + 1)})
    device = device_of(model)  # the input on the model's device: on a GPU a CPU tensor failed the start
    with torch.inference_mode():
        for size in sizes:
            ids = torch.zeros(1, size, dtype=torch.long, device=device)
            model(input_ids=ids, cache=DynamicCache(config=model.config))
    return sizes


def device_of(model) -> torch.device:
    """Where a model (a Runner or a transformers model) keeps its weights."""
    hf = getattr(model, "hf", model)
    try:
        return next(hf.parameters()).device
    except (StopIteration, AttributeError, TypeError):
        return torch.device("cpu")


def _joined(xs: list[torch.Tensor]) -> torch.Tensor:
    return xs[0] if len(xs) == 1 else torch.cat(xs)


def _growing(cache) -> bool:
    """A cache whose layers each grow by the tokens written (transformers' DynamicLayer, Phoenix's RoomyLayer)."""
    return cache is not None and all(isinstance(layer, DynamicLayer) for layer in getattr(cache, "layers", [None]))


def _cached(cache) -> int:
    """Columns the cache holds now: the new tokens' first column."""
    layer = cache.layers[0] if cache is not None and getattr(cache, "layers", None) else None
    keys = getattr(layer, "keys", None)
    return int(keys.shape[-2]) if keys is not None and keys.dim() == 4 else 0


def use_runner(pair, choice: str = "auto") -> str:
    """Put the runner where the pair's target (and draft model) stood: ``phoenix``, ``compiled`` (its elementwise
    steps fused by torch.compile), ``auto`` (phoenix wherever the architecture allows) or ``transformers``; what
    runs, one line, kept on the pair (``LoadedPair.runner``) for the run's config. An EAGLE-3 head is not a model
    and keeps its own forward."""
    if choice == "transformers":
        pair.runner = "transformers"
        return pair.runner
    why = unsupported(pair.target)
    if why is not None:
        if choice != "auto":
            raise ValueError(f"--runner {choice}: {why}; use --runner transformers")
        pair.runner = f"transformers ({why})"
        return pair.runner
    fused = choice == "compiled"
    if not isinstance(pair.target, Runner):
        pair.target = Runner(pair.target, fused)
    if pair.draft is not None and not isinstance(pair.draft, Runner) and _is_model(pair.draft):
        if unsupported(pair.draft) is None:
            pair.draft = Runner(pair.draft, fused)
    pair.runner = "phoenix, compiled ops" if fused else "phoenix"
    return pair.runner


def _is_model(module) -> bool:
    return hasattr(module, "config") and hasattr(module.config, "model_type") and hasattr(module, "model")


def unwrapped(model):
    """The transformers model behind a Runner (itself otherwise): what hashes, saves and compiles."""
    return model.hf if isinstance(model, Runner) else model
