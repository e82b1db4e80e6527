"""Linear layers with their weights prepacked for oneDNN, in eager mode: what inductor's freezing does for a
compiled graph, without compiling, so it serves every batch size and width the scheduler runs.

Whether packing pays depends on the CPU and the dtype, so ``auto`` measures it on the model's own widest layer
before choosing:
- a bf16 ``nn.Linear`` reorders its weight for oneDNN on every call; packed once, SmolLM2's MLP ran 62 against 30
  us at 16 rows (a 2-core Xeon with AMX, torch 2.13, 2026-12-02), while fp32 lost there (31 against 41 ms a step);
- on a 2-core AMD EPYC (Zen 3, AVX2 only, 2026-12-03) it is the other way round: oneDNN has no bf16 kernel there,
  and MKL's fp32 GEMM at 4-16 rows ran 3x slower than the packed one (Qwen2.5's 1536 -> 8960 MLP layer: 12.4
  against 4.2 ms at 4 rows, 12.8 against 6.9 ms at 16).
A packed layer is used only where it is batch invariant (a row's output is the same to the bit at 1 row and at 16),
so a verify of k + 1 tokens computes each token as a single step does and greedy speculation stays exact. The
original weight stays the layer's ``weight`` (read by code that asks for a dtype or shape); the packed copy is extra
memory, one more copy of the linear weights.
"""

from __future__ import annotations

import time

import torch

from engine.decode import fast_attention


class PackedLinear(torch.nn.Module):
    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        out = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        return out.reshape(*shape[:-1], self.out_features)


class Fused:
    """Packed linear layers that read the same input as one GEMM, as vLLM's ``QKVParallelLinear`` and
    ``MergedColumnParallelLinear`` do: a decode step's GEMMs are a few rows against a whole weight, so their cost is
    the call and the weight's stream, and one wide call streams better than three narrow ones. SmolLM2's 30 layers
    (q, k, v and gate, up fused) ran in 12.7 against 15.1 ms at one row and 12.7 against 15.5 ms at 8 (bf16, AMD EPYC
    Zen 4, 2 threads, 2026-12-06). Not a module: its layers' parameters stay where they were, under their names."""

    def __init__(self, layers: list[PackedLinear]):
        weight = torch.cat([layer.weight.detach() for layer in layers])
        biases = [m.bias.detach() if m.bias is not None else weight.new_zeros(m.out_features) for m in layers]
        self.bias = torch.cat(biases) if any(m.bias is not None for m in layers) else None
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, 16)
        self.sizes = [layer.out_features for layer in layers]
        self.weight = weight  # the group's plain weight, for the few-row GEMM (``project_group``); each layer's
        start = 0  # parameter becomes its rows of it (the same values: no second copy of the group's weights)
        with torch.no_grad():
            for layer in layers:
                layer.weight.data = weight[start : start + layer.out_features]
                start += layer.out_features
        self._input: torch.Tensor | None = None
        self._outputs: list[torch.Tensor] = []
        self._left = 0

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        flat = x.reshape(-1, x.shape[-1])
        out = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        return [part.reshape(*x.shape[:-1], n) for part, n in zip(out.split(self.sizes, dim=-1), self.sizes)]

    def part(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """Layer ``index``'s output for ``x``: transformers' modeling calls each layer of a group on the same input
        in turn, so the first call computes the group and its siblings take their share (the same numbers as
        Phoenix's runner, which calls the group once)."""
        if self._input is not x:
            self._input, self._outputs, self._left = x, self(x), len(self.sizes)
        out = self._outputs[index]
        self._left -= 1
        if self._left <= 0:  # every sibling served: hold no tensor between forwards
            self._input, self._outputs = None, []
        return out


class Part(torch.nn.Module):
    """One layer of a ``Fused`` group, where the layer stood (its ``weight`` and ``bias`` are the layer's own)."""

    group: Fused

    def __init__(self, linear: PackedLinear, group: Fused, index: int):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.__dict__["group"] = group  # not a submodule: nothing new in the model's state dict
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.part(x, self.index)


def project(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` for Phoenix's runner and the EAGLE-3 head, or the decode extension's GEMM where it takes a step of
    a few tokens (engine.decode.fast_attention.linear)."""
    weight, bias = getattr(layer, "weight", None), getattr(layer, "bias", None)
    flat = x.reshape(-1, x.shape[-1])  # the extension takes [M, K]; a 2-D x is its own view
    fast = fast_attention.linear(flat, weight, bias) if isinstance(weight, torch.Tensor) else None
    return layer(x) if fast is None else fast.view(*x.shape[:-1], fast.shape[-1])


def project_all(layers: tuple[torch.nn.Module, ...], x: torch.Tensor) -> list[torch.Tensor]:
    """Each layer's output for ``x``: one GEMM where the layers are a fused group (``group_of``), as ``project``
    computes one layer's."""
    group = group_of(*layers)
    if group is None:
        return [project(layer, x) for layer in layers]
    fast = fast_attention.linear(x, group.weight, group.bias)
    return list(fast.split(group.sizes, dim=-1)) if fast is not None else group(x)


GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # layers that read one input, in output order


def group_of(*layers: torch.nn.Module) -> Fused | None:
    """The ``Fused`` group these layers are, in this order, or None (the runner then calls each layer)."""
    first = layers[0]
    if not isinstance(first, Part) or len(layers) != len(first.group.sizes):
        return None
    ok = all(isinstance(m, Part) and m.group is first.group and m.index == i for i, m in enumerate(layers))
    return first.group if ok else None


def fuse(model) -> str:
    """Fuse each packed group of ``GROUPS`` in ``model``, in place; what was done, a few words. Refused where a
    fused layer's rows depend on the batch (a verify must compute each token as a single step does). A model fused
    already keeps its groups and its words."""
    if getattr(model, "_phoenix_fused", None) is not None:
        return model._phoenix_fused
    done, refused = 0, 0
    for parent in list(model.modules()):
        for names in GROUPS:
            found = [getattr(parent, name, None) for name in names]
            layers = [m for m in found if type(m) is PackedLinear]
            if len(layers) != len(names) or len({m.in_features for m in layers}) != 1:
                continue
            group = Fused(layers)
            parts = [Part(m, group, i) for i, m in enumerate(layers)]
            if not all(batch_invariant(p) for p in parts):  # each group checked: a wider GEMM may block differently
                refused += 1
                continue
            for name, p in zip(names, parts):
                setattr(parent, name, p)
            done += 1
    said = f"{done} groups fused (q, k, v; gate, up)" if done else ""
    if refused:
        said = f"{said}{'; ' if said else ''}{refused} not fused (their rows depended on the batch on this CPU)"
    model._phoenix_fused = said
    return model._phoenix_fused


def can_pack(model) -> str | None:
    """None where this model's linear layers could be packed at all; else why not, in a few words."""
    param = next(model.parameters(), None)
    if param is None or param.device.type != "cpu":
        return "not on the CPU"
    if not torch.backends.mkldnn.is_available():
        return "no oneDNN in this torch"
    if param.dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return "no oneDNN bf16 on this CPU"
    if param.dtype not in (torch.float32, torch.bfloat16):
        return f"{str(param.dtype).removeprefix('torch.')} is not packed"
    return None


def _rows(linear: torch.nn.Module, rows: int) -> torch.Tensor:
    w = linear.weight
    assert isinstance(w, torch.Tensor)
    return torch.randn(rows, int(w.shape[1]), generator=torch.Generator().manual_seed(rows)).to(w.dtype)


def batch_invariant(layer: torch.nn.Module) -> bool:
    """Each row's output is the same to the bit whether it runs alone or among sixteen."""
    with torch.inference_mode():
        x = _rows(layer, 16)
        together = layer(x)
        return all(torch.equal(layer(x[i : i + 1]), together[i : i + 1]) for i in (0, 5, 15))


def _seconds(layer: torch.nn.Module, rows: int, reps: int = 5) -> float:
    x = _rows(layer, rows)
    with torch.inference_mode():
        layer(x)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            layer(x)
            times.append(time.perf_counter() - start)
    return sorted(times)[reps // 2]


def probe(linear: torch.nn.Linear, packed: PackedLinear) -> tuple[float, float]:
    """Milliseconds for one decode step's and one 8-row verify's worth of this layer, plain and packed (medians)."""
    plain = sum(_seconds(linear, rows) for rows in (1, 8))
    fast = sum(_seconds(packed, rows) for rows in (1, 8))
    return plain * 1e3, fast * 1e3


def pack(model, choice: str = "auto") -> str:
    """Pack every linear layer of ``model`` in place: ``on`` wherever it can, ``auto`` where its widest layer also
    measures faster packed on this CPU; what was done, one line (it goes into the run's config). A model packed
    already keeps its layers and its line."""
    if choice == "off":
        return "off"
    if getattr(model, "_phoenix_packed", None):
        return model._phoenix_packed
    why = can_pack(model)
    if why is not None:
        return f"off: {why}"
    layers = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()]
    linears = [(p, n, c) for p, n, c in layers if type(c) is torch.nn.Linear]
    if not linears:
        return "off: no linear layers"
    widest = max(linears, key=lambda t: t[2].weight.numel())[2]
    trial = PackedLinear(widest)
    if not batch_invariant(trial):
        return "off: the packed layer's rows depend on the batch on this CPU"
    dtype = str(widest.weight.dtype).removeprefix("torch.")
    measured = ""
    if choice == "auto":
        plain, fast = probe(widest, trial)
        measured = f"; probe {fast:.2f} against {plain:.2f} ms plain"
        if fast >= plain:
            return f"off: {dtype} plain layers measured faster on this CPU{measured}"
    for parent, name, child in linears:
        setattr(parent, name, trial if child is widest else PackedLinear(child))
    model._phoenix_packed = f"packed {len(linears)} linear layers (oneDNN, {dtype}{measured})"
    return model._phoenix_packed


def pack_pair(pair, choice: str) -> str:
    """The target's and the draft's (a draft model or an EAGLE-3 head) linear layers, each measured on its own;
    the target's line, kept on the pair (``LoadedPair.packed``) for the run's config. A prepared pair keeps its
    line, which goes on with its fusing and its GEMM cut (the server packs again what ``prepare`` packed)."""
    line = pack(pair.target, choice)
    if not pair.packed.startswith(line):
        pair.packed = line
    if pair.draft is not None:
        pack(pair.draft, choice)
    return pair.packed


def fuse_pair(pair) -> None:
    """Fuse the target's and a draft model's groups where Phoenix's runner runs them eagerly (``--runner compiled``
    runs transformers' modeling under torch.compile, and its layers stay as they are); the target's line joins
    ``LoadedPair.packed``."""
    for model in (pair.draft, pair.target):
        hf = getattr(model, "hf", None)
        if hf is None or getattr(model, "compiled", True):
            continue
        said = fuse(hf)
        if model is pair.target and said:
            pair.packed = f"{pair.packed}; {said}"
