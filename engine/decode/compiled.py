"""Static caches and compiled forwards for Phoenix's loop (gpt-fast's recipe, on any transformers causal LM).

A static cache is preallocated once per size bucket and reused by every request of that size: rejection moves its
write position back (``StaticCache.crop``), so no tensor grows or is copied per step. ``Compiled`` wraps a model so
that every forward of up to ``max_len`` tokens (each verify, each draft step, short prefills) runs a graph compiled
for that exact length, and longer ones (prefills) run eager, so prompt lengths never trigger a recompile. All
lengths are compiled and run once in ``warm`` before any clock starts; graphs added later are counted as
recompiles, which inside a measured request is a bug.

``freeze`` adds inductor's weight freezing: the weights become constants of the graph, folded and prepacked for
oneDNN / MKL once at compile time, instead of being read as inputs per call, so small-width forwards (a verify of
a few tokens, a batch of rows) run a GEMM kernel laid out for them; `python -m benchmarks.limits` measures what it
gains on the machine at hand. It keeps a second, packed copy of every weight: the eager forwards (long prefills)
still use the model's own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from transformers import StaticCache

CACHE_BUCKET = 256  # static caches come in multiples of this many positions: a few shapes, little padding


def bucket(positions: int) -> int:
    return CACHE_BUCKET * math.ceil(positions / CACHE_BUCKET)


class StaticCaches:
    """One preallocated cache per (model, size bucket), reset between requests."""

    def __init__(self) -> None:
        self._caches: dict[tuple[int, int], StaticCache] = {}

    def get(self, model, positions: int) -> StaticCache:
        key = (id(model), bucket(positions))
        cache = self._caches.get(key)
        if cache is None:
            cache = self._caches[key] = StaticCache(config=model.config, max_cache_len=key[1])
        else:
            with torch.inference_mode():  # its tensors were made in inference mode, where requests run
                cache.reset()
        return cache


@dataclass
class CompileStats:
    compiled: bool = False  # False when compile was off or failed (then the run went on eager)
    frozen: bool = False  # the weights were frozen into the graphs (inductor's freezing, prepacked)
    error: str | None = None  # why compile failed, one line
    warmup_s: float = 0.0  # compiling and first runs of every length, before any clock
    graphs: int = 0  # graphs after the warm-up
    recompiles: int = 0  # graphs added after the warm-up (inside measured requests: a bug)
    graph_breaks: int = 0


def graph_count() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _breaks() -> int:
    from torch._dynamo.utils import counters

    return int(sum(counters["graph_break"].values()))


class Compiled:
    """A model whose forwards of 1..max_len tokens run compiled; attributes pass through to the model."""

    def __init__(self, model, max_len: int, mode: str | None = None, freeze: bool = False):
        self.model, self.max_len = model, max_len
        # dynamic=None: the first length compiles static, the next one a graph with the length symbolic, which
        # then serves every length: two compiles per model instead of one per verify length
        # mode "reduce-overhead" adds CUDA graphs on a GPU (benchmarks/gpu.py); on a CPU the default is the one.
        # Freezing applies only to graphs compiled with grad off: warm() compiles under inference_mode.
        options: dict[str, str | int | bool | Callable[..., Any]] | None = {"freezing": True} if freeze else None
        self.fn = torch.compile(model.forward, dynamic=None, mode=None if freeze else mode, options=options)

    def __call__(
        self,
        input_ids: torch.Tensor,
        cache=None,
        use_cache: bool = True,
        logits_to_keep: int = 0,
        output_hidden_states: bool = False,
        **rest,
    ):
        n = input_ids.shape[1]
        if n > self.max_len or rest:
            return self.model(
                input_ids=input_ids,
                cache=cache,
                use_cache=use_cache,
                logits_to_keep=logits_to_keep,
                output_hidden_states=output_hidden_states,
                **rest,
            )
        if n == 1 and cache is not None:
            return self._single(input_ids, cache, logits_to_keep, output_hidden_states)
        # One call form per length: every position's logits, then the ones asked for. A varying logits_to_keep
        # (1 for a draft model's catch-up, n for a verify) would otherwise be a guard, and a recompile.
        out = self.fn(
            input_ids=input_ids,
            cache=cache,
            use_cache=True,
            logits_to_keep=n,
            output_hidden_states=bool(output_hidden_states),
        )
        if 0 < logits_to_keep < n:
            out.logits = out.logits[:, -logits_to_keep:]
        return out

    def _single(self, input_ids, cache, logits_to_keep: int, output_hidden_states: bool):
        """A one-token forward run as two (the token twice), the second dropped from the cache and the outputs.
        A size-1 length gets a graph of its own, specialised for it, and frozen that graph was the slowest of all
        widths (bf16 on a Zen 5 EPYC: 32.4 ms for one token, 24.6 ms for two, benchmarks/results/
        limits-20261202T032212.json); causal attention keeps the copy out of the first position's result, and the
        cache's write position goes back over it."""
        out = self.fn(
            input_ids=input_ids.repeat(1, 2),
            cache=cache,
            use_cache=True,
            logits_to_keep=2,
            output_hidden_states=bool(output_hidden_states),
        )
        cache.crop(-1)
        out.logits = out.logits[:, :1]
        if output_hidden_states:
            out.hidden_states = tuple(h[:, :1] for h in out.hidden_states)
        return out

    def __getattr__(self, name):
        return getattr(self.model, name)


def warm(models: list, caches: StaticCaches, max_len: int, positions: int, taps: tuple[int, ...] = ()) -> float:
    """Run every length 1..max_len once on each compiled model (the first, the target, also with the taps' hidden
    states), in a cache of the run's size; returns the seconds it took."""
    start = time.perf_counter()
    with torch.inference_mode():
        for i, model in enumerate(models):
            for want_taps in sorted({False, bool(taps) and i == 0}):  # the target's taps feed an EAGLE-3 head
                cache = caches.get(model, positions)
                # as a request does: an eager prefill first (it initialises the cache's layers), then short forwards
                prompt = torch.zeros((1, max_len + 1), dtype=torch.long, device=model.device)
                model(prompt, cache=cache, use_cache=True, logits_to_keep=1, output_hidden_states=want_taps)
                for n in range(1, max_len + 1):
                    ids = torch.zeros((1, n), dtype=torch.long, device=model.device)
                    model(ids, cache=cache, use_cache=True, logits_to_keep=n, output_hidden_states=want_taps)
                    cache.crop(-n)
    return time.perf_counter() - start


def compile_models(
    models: list,
    caches: StaticCaches,
    max_len: int,
    positions: int,
    taps: tuple[int, ...] = (),
    mode: str | None = None,
    freeze: bool = False,
) -> tuple[list, CompileStats]:
    """The models wrapped and warmed, or (where compile fails on this platform) the models as they were, with
    the reason in the stats."""
    before = graph_count()
    try:
        wrapped = [Compiled(m, max_len, mode, freeze) for m in models]
        seconds = warm(wrapped, caches, max_len, positions, taps)
    except Exception as exc:  # inductor needs a C++ compiler, and some platforms lack one: run eager instead
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        return models, CompileStats(error=f"{type(exc).__name__}: {first}")
    return wrapped, CompileStats(
        compiled=True, frozen=freeze, warmup_s=seconds, graphs=graph_count() - before, graph_breaks=_breaks()
    )


def finish(stats: CompileStats, graphs_at_start: int) -> dict:
    """The stats with the graphs added since ``graphs_at_start`` (after the warm-up) counted as recompiles; the
    warm-up requests of a run follow the engine's warm-up, so their graphs count too (they are outside every
    figure, but a graph they add means the warm-up missed a shape)."""
    stats.recompiles = max(0, graph_count() - graphs_at_start) if stats.compiled else 0
    stats.graph_breaks = _breaks() if stats.compiled else 0
    return asdict(stats)
