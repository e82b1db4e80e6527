"""Linear layers with their weights prepacked for oneDNN, in eager mode: what inductor's freezing does for a
compiled graph, without compiling, so it serves every batch size and width the scheduler runs.

A bf16 ``nn.Linear`` on the CPU reorders its weight for oneDNN on every call; packed once, the same GEMM runs
about twice as fast at the row counts a decode step has (576->1536, SmolLM2's MLP: 62 against 30 us at 16 rows,
57 against 24 us at 1 row; a 2-core Xeon with AMX, torch 2.13, 2026-12-02), with the same result to the bit. On
that machine fp32 lost (31 against 41 ms a step alone), so ``auto`` packs bf16 only, and only where a probe
gives the plain layer's output exactly. The original weight stays the layer's ``weight`` (read by code that
asks for a dtype or shape); the packed copy is extra memory, one more copy of the linear weights.
"""

from __future__ import annotations

import torch


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


def can_pack(model) -> str | None:
    """None where ``auto`` packs this model; else why not, in a few words."""
    param = next(model.parameters(), None)
    if param is None or param.device.type != "cpu":
        return "not on the CPU"
    if param.dtype != torch.bfloat16:
        return f"{str(param.dtype).removeprefix('torch.')} (packing pays in bf16 only, measured)"
    if not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
        return "no oneDNN bf16 on this CPU"
    return None


def exact(linear: torch.nn.Linear, packed: PackedLinear) -> bool:
    """The packed layer gives the plain one's output to the bit, at one row and at sixteen."""
    with torch.inference_mode():
        for rows in (1, 16):
            x = torch.randn(
                rows, linear.in_features, dtype=linear.weight.dtype, generator=torch.Generator().manual_seed(rows)
            )
            if not torch.equal(linear(x), packed(x)):
                return False
    return True


def pack(model, choice: str = "auto") -> str:
    """Pack every linear layer of ``model`` in place where ``choice`` and the machine allow; what was done, one
    line (it goes into the run's config)."""
    if choice == "off":
        return "off"
    why = can_pack(model)
    if why is not None:
        return f"off: {why}"
    layers = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()]
    linears = [(p, n, c) for p, n, c in layers if type(c) is torch.nn.Linear]
    if not linears:
        return "off: no linear layers"
    first = PackedLinear(linears[0][2])
    if not exact(linears[0][2], first):
        return "off: the packed layer's output differs from the plain one's on this CPU"
    for parent, name, child in linears:
        setattr(parent, name, first if child is linears[0][2] else PackedLinear(child))
    return f"packed {len(linears)} linear layers (oneDNN, bf16)"
