"""A run's modes at ``--concurrency N``: the prompts of one mode decoded N at a time through the engine core the
server runs (engine.decode.scheduler), so a run answers "does speculation pay at the load I run" on the path
that serves it, not on a single stream the server never runs.

A group of N prompts runs mode after mode (target first, the rest in alternating order, as single-stream runs
interleave), each mode's N requests submitted together and decoded until the last one finishes. Each request is
a record as at concurrency 1: its own latency from submission (so its wait for the batch is in it), its TTFT, its
queue wait and the mean batch it ran in; identity is judged against the target's output in the same group.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from db.entities import RequestRecord
from engine.bench.config import BenchConfig
from engine.bench.request import RunState, judge, make_record, new_trace_id
from engine.decode.client import EngineClient, RequestStream
from engine.decode.scheduler import Scheduler
from engine.decode.sequence import Request
from engine.modes import Mode
from engine.prompts.sets import Prompt


def groups(plan: list[tuple[Prompt, str]], n: int) -> Iterator[tuple[str, list[Prompt]]]:
    """The plan as (mode, prompts) batches: the prompts in groups of n, each group's modes in the plan's order."""
    prompts: list[Prompt] = []
    for prompt, _ in plan:
        if prompt not in prompts:
            prompts.append(prompt)
    for start in range(0, len(prompts), n):
        chunk = prompts[start : start + n]
        modes: list[str] = []
        for prompt, mode in plan:
            if prompt in chunk and mode not in modes:
                modes.append(mode)
        for mode in modes:
            yield mode, [p for p in chunk if (p, mode) in plan]


def run_group(
    state: RunState,
    run_id: int,
    cfg: BenchConfig,
    prompts: list[Prompt],
    ids: list[list[int]],
    mode: str,
    warmup: bool,
    shadow_rng=None,
) -> list[tuple[RequestRecord, object]]:
    """Decode one mode's requests together; their records (judged, unless a warm-up) in the prompts' order."""
    parsed = Mode.parse(mode)
    dec = state.decoder
    drafter, k = parsed.drafter(cfg.drafter, dec.pair.draft is not None), parsed.k or 0
    if k == 0:
        drafter = "none"
    sched = Scheduler(dec.pair.target, dec.row_drafter, dec.eos_id, None, max_batch=len(ids), max_queue=len(ids))
    client = EngineClient(sched)  # the server's door too
    streams: list[RequestStream] = []
    cpu_before = time.process_time()  # the group's CPU, every thread: its requests share each step
    for i, (prompt, prompt_ids) in enumerate(zip(prompts, ids)):
        sampling = cfg.sampling(prompt.id)
        req = Request(prompt_ids, cfg.max_new_tokens, drafter, k if drafter != "none" else None, sampling, id=str(i))
        streams.append(client.submit(req))
    client.drain()
    finished = {s.request.id: s.finished for s in streams if s.finished is not None}
    cpu = time.process_time() - cpu_before
    if not warmup:
        state.timed(mode, cpu, sum(f.stats.output_tokens for f in finished.values()))
    out: list[tuple[RequestRecord, object]] = []
    for i, (prompt, prompt_ids) in enumerate(zip(prompts, ids)):
        f = finished[str(i)]
        if f.failed:
            raise RuntimeError(f"{mode} on {prompt.id}: {f.error}")
        text = dec.text(f.stats)
        rec = make_record(run_id, state.seq, mode, k, prompt, f.stats, text, warmup, new_trace_id(), f)
        rec.drafter = drafter
        state.seq += 1
        if not warmup:
            judge(state, cfg, rec, f.stats, prompt, prompt_ids, mode, None, shadow_rng)
            with state.telemetry.request(mode, k, run_id, cfg.target, cfg.draft, rec.trace_id or "") as txn:
                state.telemetry.finish_request(txn, rec)
        out.append((rec, f.stats))
    return out
