"""Phoenix's attention for a decode or verify step on the CPU in bf16: a few query rows (the query heads that share
a KV head, times the step's tokens) over a long cache. SDPA's flash kernel tiles for long queries: in a decode step
it read the cache at about 7 GB/s (AMD EPYC Zen 4, 2 cores, 31 GB/s to DRAM), a third of a SmolLM2 step at 8 rows.
``kernels/decode_attention.cpp`` reads each row's keys and values once, as bf16, with AVX-512 BF16 dot products and
fp32 sums (the rounding SDPA's bf16 path has; where the CPU has AMX, the scores come from its tiles, the keys read
as cached), and is built for this CPU on first use (about 25 s, cached by torch under ``~/.cache/torch_extensions``,
one build per CPU and source). Where it cannot run (no AVX-512 BF16, no
compiler, ``PHOENIX_DECODE_ATTENTION=sdpa``) SDPA runs, and ``describe()`` says which and why; fp32 never uses it
(SDPA is the path its exactness is tested on). The same extension holds the step's RMSNorm and RoPE as one call
each (``rms_norm``, ``rotate``) and a GEMM for a forward of up to sixteen tokens (``linear``), which the opt-out turns
off with it."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("kernels") / "decode_attention.cpp"
ROWS = 8  # query rows a KV head up to which the kernel beat SDPA (12 and 24 rows: SDPA's tiles won)
LINEAR_ROWS = 16  # tokens a forward up to which the extension's GEMM can take the call (beyond, oneDNN's was as fast)
_cuts: dict[tuple[int, int], int] = {}  # a weight's [out, in] -> tokens up to which its GEMM is the extension's here
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp")  # -fopenmp: ATen's parallel_for is inline OpenMP
_lock = threading.Lock()
_state: dict = {}


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def cpu_bf16(x: torch.Tensor) -> bool:
    """The extension's ops read bf16 tensors in the host's memory: a GPU's tensors never reach them."""
    return x.dtype == torch.bfloat16 and x.device.type == "cpu"


def _build():
    if os.environ.get("PHOENIX_DECODE_ATTENTION", "kernel") == "sdpa":
        return None, "PHOENIX_DECODE_ATTENTION=sdpa"
    flags = _cpu_flags()
    if not {"avx512f", "avx512_bf16", "avx512bw", "avx512vl"} <= flags:
        return None, "this CPU has no AVX-512 BF16"
    # one build per source, CPU and torch: a build for another CPU (-march=native) must never load here
    code = b"".join(p.read_bytes() for p in sorted(SOURCE.parent.iterdir()) if p.suffix in (".cpp", ".h"))
    tag = hashlib.sha256(code + " ".join(sorted(flags)).encode() + torch.__version__.encode())
    try:
        from torch.utils.cpp_extension import load

        module = load(name=f"phoenix_decode_attention_{tag.hexdigest()[:12]}", sources=[str(SOURCE)],
                      extra_cflags=list(FLAGS), verbose=False)  # fmt: skip
    except Exception as e:  # no compiler, no ninja, a build error: SDPA serves
        said = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        return None, f"the kernel did not build ({said})"
    return module, None


def extension():
    """The built extension, built on first call; None where it cannot run. Every layer of every step asks: once
    built, the answer is read without the lock."""
    if "module" not in _state:
        with _lock:
            if "module" not in _state:
                module, why = _build()
                _state["why"] = why
                _state["module"] = module  # last: a reader that finds the module finds its reason too
    return _state["module"]


def kernel():
    """The attention op (``op(q, k, v, mask, scale)``); None where the extension cannot run."""
    module = extension()
    return None if module is None else module.decode_attention


def describe(dtype: str = "bfloat16") -> str:
    """Which attention (and which of the extension's other ops) a decode step of this dtype runs, in words, for the
    run's record."""
    if "bfloat16" not in str(dtype):
        return f"SDPA ({dtype}: the kernel is bf16's)"
    if kernel() is not None:
        cuts = sorted(set(_cuts.values()))
        gemm = f"up to {LINEAR_ROWS} tokens" if not cuts else f"up to {'/'.join(map(str, cuts))} tokens by weight"
        amx = getattr(extension(), "amx", False)
        gemm += " (AMX tiles from 2 tokens)" if amx else ""
        measured = ", as measured against oneDNN's on this CPU" if cuts else ""
        scores = " (scores on AMX tiles)" if amx else ""
        return (
            f"Phoenix's AVX-512 BF16 decode kernel{scores} up to {ROWS} query rows a KV head, SDPA beyond; its "
            f"one-call RMSNorm and RoPE; its GEMM for steps of {gemm}{measured}, oneDNN beyond"
        )
    return f"SDPA ({_state['why']})"


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask, scale: float) -> torch.Tensor | None:
    """Attention of q [B, KV, R, d] (row r: token r % n) over [B, KV, S, d] by the kernel, with mask [B, 1, n, S]
    (None: every column); None where the kernel does not take this call (SDPA does)."""
    if not cpu_bf16(q) or q.shape[2] > ROWS or q.shape[-1] % 32 or keys.stride(-1) != 1:
        return None
    op = kernel()
    if op is None:
        return None
    rows = _EMPTY if mask is None else mask[:, 0].contiguous()
    return op(q.contiguous(), keys, values, rows, scale)


_EMPTY = torch.empty(0, dtype=torch.bool)
NO_BIAS = torch.empty(0, dtype=torch.bfloat16)


def exact_rows(weight: torch.Tensor) -> int:
    """Tokens up to which a forward's linear layers run at the forward's own token count (engine.decode.runner's
    ``bucket``): the extension's GEMM builds nothing per shape (LINEAR_ROWS where it takes the calls, or the widest
    cut measured here); oneDNN builds a kernel per shape, so beyond 8 it meets a few buckets."""
    if not cpu_bf16(weight) or extension() is None:
        return 8
    return min(LINEAR_ROWS, max(_cuts.values(), default=LINEAR_ROWS))


def rows_for(weight: torch.Tensor) -> int:
    """Tokens up to which this weight's GEMM is the extension's: the cut ``engine.decode.cuts.measure_cut``
    measured for its model's forwards on this CPU, else LINEAR_ROWS (where the extension's beat oneDNN's on an AMD
    Zen 4 without AMX). With AMX, oneDNN's cost hardly grows from 1 to 16 rows, and the extension's no longer does
    either: it takes 2 to 16 tokens on AMX's tiles (``linear``); ``measure_cut`` draws the line on every CPU."""
    return min(LINEAR_ROWS, _cuts.get((weight.shape[0], weight.shape[-1]), LINEAR_ROWS))


def set_cut(shape: tuple[int, int], rows: int) -> None:
    """Record a measured cut (``rows_for``): 0 where oneDNN's GEMM was faster even at one row."""
    _cuts[shape] = rows


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """``x @ weight.T + bias`` by the extension for a forward of 1 to ``rows_for(weight)`` tokens (x [M, K] bf16, K
    a multiple of 32); None where it does not take the call (oneDNN does). A step's linear layers are a few rows
    against a whole weight, so their cost is the weight's stream and the call: oneDNN's packed GEMM streamed
    SmolLM2's weights at about 19 GB/s at one row, the extension's at about 25, each weight block read once for
    every row. A SmolLM2 bf16 step (``benchmarks.profile_step``, AMD EPYC Zen 4, 2 threads, 2026-12-06, interleaved
    with oneDNN's): one row 20.5-20.8 ms -> 13.9-14.2, two rows 22.2-22.9 -> 15.5-16.5, four 20.8-23.2 -> 20.4-21.0,
    eight 25.6-27.0 -> 23.6-23.8. Beyond eight rows each weight block, read once, serves every further eight rows
    from L1 (medians of ten steps, three times interleaved with oneDNN's taking them, same machine): nine rows 31.2
    -> 26.6 ms, twelve 32.3 -> 29.4, sixteen 35.9 -> 34.2; at 24 rows oneDNN's was faster (46.3 against 48.2 ms).
    Each output is one fp32 dot product rounded once, as oneDNN's is, summed in another order: in bf16 a token
    computed in a forward of more tokens than its cut can differ in its last bit from the same token computed
    alone (the attention kernel's ROWS draw the same kind of line). fp32 never takes it.

    Where the CPU has AMX, 2 to 16 tokens go through its tiles instead (kernels/amx_gemm.h), the weight read as
    stored: their cost hardly grows with the count, and oneDNN's fixed cost a call is gone (2-core Xeon with AMX,
    2026-12-07, medians: SmolLM2's 3072 x 576 at 16 rows 85 against oneDNN's 184 us; the 1.5B's 17920 x 1536 1370
    against 1503). A row's bits are the same at every count from 2 to 16; a lone token stays on AVX-512 (11
    against 22 us for 960 x 576), so it can differ in its last bit from the same token among others."""
    if not cpu_bf16(x) or x.dim() != 2 or not 1 <= x.shape[0] <= rows_for(weight) or x.shape[1] % 32:
        return None
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):  # training: the op has no backward
        return None
    if weight.dtype != torch.bfloat16 or not weight.is_contiguous() or weight.shape[1] != x.shape[1]:
        return None
    if bias is not None and (bias.dtype != torch.bfloat16 or not bias.is_contiguous()):
        return None
    module = extension()
    if module is None:
        return None
    return module.linear(x.contiguous(), weight, NO_BIAS if bias is None else bias)


def rms_norm(pure):
    """``pure`` (the runner's LlamaRMSNorm) through the extension's one-call op where it takes the call (bf16, a
    contiguous row a multiple of 16 wide): the torch version is eight small ops, 36 us at 8 rows of 576 against
    about 5 (AMD EPYC Zen 4), 61 times a SmolLM2 step. The sum of squares adds in another order, so a row's result
    can differ from torch's in its last bf16 bit; fp32 never takes it."""

    def norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        module = extension() if cpu_bf16(x) else None
        wide = x.shape[-1]
        if module is None or weight.dtype != torch.bfloat16 or weight.numel() != wide or not x.is_contiguous():
            return pure(x, weight, eps)
        if wide % 16 or not weight.is_contiguous():
            return pure(x, weight, eps)
        return module.rms_norm(x, weight, eps)

    return norm


def rotate(pure):
    """``pure`` (the runner's RoPE) through the extension's op where it takes the call (bf16, rotary over the whole
    head of a multiple of 32, unit stride in it): the same bits as torch's ops, in one call instead of six."""

    def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        module = extension() if cpu_bf16(x) else None
        if (
            module is None
            or x.dim() != 3
            or x.stride(-1) != 1
            or x.shape[-1] % 32
            or cos.shape[-1] != x.shape[-1]
            or not (cos.is_contiguous() and sin.is_contiguous())
            or cos.dtype != torch.bfloat16
        ):
            return pure(x, cos, sin)
        return module.rotate(x, cos, sin)

    return rope
