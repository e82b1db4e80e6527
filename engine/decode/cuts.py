"""Which GEMM takes a few-token forward on this CPU: the decode extension's (engine.decode.fast_attention.linear,
and the layer blocks built on it) or oneDNN's, measured per model on whole forwards when the pair is prepared. The
extension's GEMM reads each weight block once for every row, which wins while a forward is bound by the weights'
stream; oneDNN's with AMX multiplies 16 rows in about the time of one, which wins once the extension's arithmetic
shows. Where the line falls depends on the CPU and on whether the model's weights fit its cache, so it is measured,
not assumed; the run's config says where it fell (``LoadedPair.packed``)."""

from __future__ import annotations

import time

import torch

from engine.decode import fast_attention
from engine.decode.batch import roomy_cache
from engine.decode.packed import PackedLinear, Part

CUT_ROWS = (1, 2, 4, 8, 12, 16)  # the few-token forwards a server runs: a step of up to 16 rows, a verify of k + 1
# Where both GEMMs stream the same weights from DRAM (the 1.5B at one row) they tie, and a disturbed host's medians of
# three fell either way: the 1.5B's cut came out 0, 1 or 16 from one run to the next (2026-12-07), and at 0 its 2 to
# 16-token forwards lost the AMX GEMM's 0.83-0.92x. A tie keeps the extension (whose rows are the same bits at any
# count from 2 to 16); only a loss by more than this ends its range.
TIE = 0.03


def _gemms(model) -> list[tuple[int, int]]:
    """The shape of each weight a few-token forward of ``model`` could hand the extension's GEMM, once each."""
    shapes: list[tuple[int, int]] = []
    for module in model.modules():
        weight = module.group.weight if isinstance(module, Part) else getattr(module, "weight", None)
        if not isinstance(module, (Part, PackedLinear, torch.nn.Linear)) or not isinstance(weight, torch.Tensor):
            continue
        shape = (int(weight.shape[0]), int(weight.shape[1]))
        if fast_attention.cpu_bf16(weight) and weight.is_contiguous() and not shape[1] % 32 and shape not in shapes:
            shapes.append(shape)
    return shapes


def _forward_ms(model, ids: torch.Tensor, cache, shapes: list[tuple[int, int]], rows: int) -> float:
    """One forward of ``ids`` after the cached context, each shape's cut set to ``rows``; the cache cropped back."""
    for shape in shapes:
        fast_attention.set_cut(shape, rows)
    start = time.perf_counter()
    model(input_ids=ids, cache=cache, use_cache=True)
    took = (time.perf_counter() - start) * 1e3
    cache.crop(-ids.shape[1])
    return took


def measure_cut(model, reps: int = 3) -> int:
    """Tokens up to which a forward of ``model`` (Phoenix's runner) runs faster with the extension's GEMM (and the layer
    blocks) than with oneDNN's taking every linear layer: each row count of CUT_ROWS timed both ways in turn, whole
    forwards after a short cached context (a forward without a cache takes another path), medians; the first where
    it loses by more than TIE ends the range (0: it lost at one row). Whole forwards, not a GEMM alone: one weight
    timed again and again sits in the cache, where a step streams every layer's. On a 2-core Xeon with AMX (480 MB
    L3, 2026-12-07) SmolLM2 bf16 fits in the cache and the extension won to 8 rows (4 rows 23.2 against 29.5 ms),
    lost at 16 (53.8 against 49.0); the 1.5B streams from DRAM and it won at one row, lost from 2 or 4 (2 rows 147.8
    against 134.1 ms, 16 rows 320 against 172); on a Zen 4 it won to 16 rows on both. Those were its AVX-512 GEMM's
    figures; since it takes 2 to 16 tokens on AMX's tiles where the CPU has them, it won to 16 rows on both models
    on that Xeon (engine.decode.fast_attention.linear)."""
    shapes = _gemms(model)
    vocab, seed = int(model.config.vocab_size), torch.Generator().manual_seed(0)
    cut, cache = 0, roomy_cache(model.config)
    with torch.inference_mode():
        model(input_ids=torch.randint(1, vocab, (1, 64), generator=seed), cache=cache, use_cache=True)  # a context
        for rows in CUT_ROWS:
            ids = torch.randint(1, vocab, (1, rows), generator=seed)
            ours, theirs = [], []
            for rep in range(reps + 1):  # the first of each builds what it builds (oneDNN's kernel for the shape)
                a = _forward_ms(model, ids, cache, shapes, fast_attention.LINEAR_ROWS)
                b = _forward_ms(model, ids, cache, shapes, 0)
                if rep:
                    ours.append(a)
                    theirs.append(b)
            if sorted(ours)[reps // 2] > sorted(theirs)[reps // 2] * (1 + TIE):
                break
            cut = rows
    for shape in shapes:
        fast_attention.set_cut(shape, cut)
    return cut


def calibrate(model) -> str:
    """The extension's cut for ``model``'s weights, measured (``measure_cut``) unless every shape of it was measured
    already in this process; a few words for the run's config, "" where the extension does not run or ``model`` is
    not Phoenix's runner (its weights keep LINEAR_ROWS). The cut is the CPU's and the model's size: it decides which
    GEMM a few-token forward runs (``fast_attention.rows_for``), never what a fp32 forward computes."""
    if fast_attention.extension() is None or not hasattr(model, "hf") or getattr(model, "compiled", False):
        return ""
    shapes = _gemms(model)
    if not shapes:
        return ""
    known = [fast_attention._cuts.get(shape) for shape in shapes]
    cut = known[0] if all(k == known[0] and k is not None for k in known) else measure_cut(model)
    return f"the extension's GEMM up to {cut} tokens a forward (measured against oneDNN's here)"


def calibrate_pair(pair) -> None:
    """The extension's cut for each weight shape of the target and the draft (``calibrate``), after fusing (a fused
    group is one GEMM, measured as one); the target's words join ``LoadedPair.packed``."""
    for model in (pair.draft, pair.target):
        if model is not None:
            said = calibrate(model)
            if model is pair.target and said:
                pair.packed = f"{pair.packed}; {said}"
