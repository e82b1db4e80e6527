"""Phoenix's attention for a decode or verify step on the CPU in bf16: a few query rows (the query heads that share
a KV head, times the step's tokens) over a long cache. SDPA's flash kernel tiles for long queries: in a decode step
it read the cache at about 7 GB/s (AMD EPYC Zen 4, 2 cores, 31 GB/s to DRAM), a third of a SmolLM2 step at 8 rows.
``kernels/decode_attention.cpp`` reads each row's keys and values once, as bf16, with AVX-512 BF16 dot products and
fp32 sums (the rounding SDPA's bf16 path has), and is built for this CPU on first use (about 25 s, cached by torch
under ``~/.cache/torch_extensions``, one build per CPU and source). Where it cannot run (no AVX-512 BF16, no
compiler, ``PHOENIX_DECODE_ATTENTION=sdpa``) SDPA runs, and ``describe()`` says which and why; fp32 never uses it
(SDPA is the path its exactness is tested on)."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("kernels") / "decode_attention.cpp"
ROWS = 8  # query rows a KV head up to which the kernel beat SDPA (12 and 24 rows: SDPA's tiles won)
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


def _build():
    if os.environ.get("PHOENIX_DECODE_ATTENTION", "kernel") == "sdpa":
        return None, "PHOENIX_DECODE_ATTENTION=sdpa"
    flags = _cpu_flags()
    if not {"avx512f", "avx512_bf16", "avx512bw", "avx512vl"} <= flags:
        return None, "this CPU has no AVX-512 BF16"
    # one build per source, CPU and torch: a build for another CPU (-march=native) must never load here
    tag = hashlib.sha256(SOURCE.read_bytes() + " ".join(sorted(flags)).encode() + torch.__version__.encode())
    try:
        from torch.utils.cpp_extension import load

        module = load(name=f"phoenix_decode_attention_{tag.hexdigest()[:12]}", sources=[str(SOURCE)],
                      extra_cflags=list(FLAGS), verbose=False)  # fmt: skip
    except Exception as e:  # no compiler, no ninja, a build error: SDPA serves
        said = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        return None, f"the kernel did not build ({said})"
    return module.decode_attention, None


def kernel():
    """The compiled op (``op(q, k, v, mask, scale)``), built on first call; None where it cannot run. Every layer of
    every step asks: once built, the answer is read without the lock."""
    if "op" not in _state:
        with _lock:
            if "op" not in _state:
                op, why = _build()
                _state["why"] = why
                _state["op"] = op  # last: a reader that finds op finds its reason too
    return _state["op"]


def describe(dtype: str = "bfloat16") -> str:
    """Which attention a decode step of this dtype runs, in words, for the run's record."""
    if "bfloat16" not in str(dtype):
        return f"SDPA ({dtype}: the kernel is bf16's)"
    if kernel() is not None:
        return f"Phoenix's AVX-512 BF16 decode kernel up to {ROWS} query rows a KV head, SDPA beyond"
    return f"SDPA ({_state['why']})"


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask, scale: float) -> torch.Tensor | None:
    """Attention of q [B, KV, R, d] (row r: token r % n) over [B, KV, S, d] by the kernel, with mask [B, 1, n, S]
    (None: every column); None where the kernel does not take this call (SDPA does)."""
    if q.dtype != torch.bfloat16 or q.shape[2] > ROWS or q.shape[-1] % 32 or keys.stride(-1) != 1:
        return None
    op = kernel()
    if op is None:
        return None
    rows = _EMPTY if mask is None else mask[:, 0].contiguous()
    return op(q.contiguous(), keys, values, rows, scale)


_EMPTY = torch.empty(0, dtype=torch.bool)
