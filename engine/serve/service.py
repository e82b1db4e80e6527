"""Phoenix's server, below HTTP: the loaded pair, the batching loop on its own thread, and the live run it records.

``Service.start`` profiles the forward's cost at the batch sizes and widths the loop will run, opens a run in the
store and starts the loop; ``submit`` hands it a request; every finished request becomes a row of that run (its
arms, per-position counts, time split, queue wait and batch), every loop step a ``serve_steps`` row, in batches
from a recorder thread, so a ``kill -9`` loses only what had not been written yet. ``stop`` drains: requests
already admitted or waiting finish and are recorded, then the run is marked done.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
import time
from collections import Counter
from dataclasses import asdict

import torch
from transformers import DynamicCache

from db.entities import RequestRecord
from db.store import HEARTBEAT_S, Store
from engine import runspec
from engine.catalog import model_name
from engine.decode import fast_attention
from engine.decode.batch import BatchCache, verify_batch
from engine.decode.client import EngineClient, RequestStream
from engine.decode.decoder import Decoder
from engine.decode.eagle3.drafter import warm as warm_head
from engine.decode.packed import pack_pair
from engine.decode.prefix import PrefixCache
from engine.decode.runner import Runner, warm
from engine.decode.scheduler import Scheduler
from engine.decode.sequence import Finished, Request
from engine.observe.prometheus import BLOCK_SIZE, Metrics
from engine.observe.sentry import Telemetry
from engine.provenance import environment
from engine.record.rows import served_record, variant
from engine.record.spills import Recorder, replay_spills, spill_path
from engine.record.writer import Ended
from engine.serve.config import ServeConfig, stored_config
from engine.serve.cost import CpuMeter
from engine.serve.shadow import Shadow
from engine.serve.tuner import LoadTuner, profile_cost

# the forward shapes warmed before ready: beyond this a prefill's new shape costs oneDNN's kernel build once (under a
# millisecond a layer shape) against a forward of hundreds of milliseconds, and warming every multiple of 16 up to a
# 2048-token budget would take minutes
WARM_TOKENS = 512

log = logging.getLogger("phoenix.serve")


def default_drafter(cfg: ServeConfig, decoder: Decoder) -> str:
    if cfg.drafter != "auto":
        decoder.drafter(cfg.drafter)  # one line naming what to pass when the pair cannot draft this way
        return cfg.drafter
    if decoder._eagle3 is not None:
        return "eagle3"
    return "model" if decoder._model_drafter is not None else "ngram"


class Service:
    def __init__(
        self,
        cfg: ServeConfig,
        decoder: Decoder,
        store: Store | None = None,
        metrics: Metrics | None = None,
        telemetry: Telemetry | None = None,
    ):
        self.cfg, self.decoder, self.store = cfg, decoder, store
        self.metrics = metrics or Metrics(prefix=cfg.metrics_prefix)
        self.telemetry = telemetry or Telemetry.off()
        self.model_name = cfg.served_model_name or decoder.pair.target_name
        self.drafter = default_drafter(cfg, decoder)
        self.draft = model_name(decoder.pair.draft_name) if decoder.pair.draft_name else None  # by name, never a path
        self.tuner = LoadTuner(cfg.k_max, epsilon=cfg.epsilon, seed=cfg.seed, hold_rows=cfg.hold_rows)
        self.scheduler = Scheduler(
            decoder.pair.target,
            decoder.row_drafter,
            decoder.eos_id,
            self.tuner,
            cfg.max_batch,
            cfg.max_queue,
            budget=cfg.max_num_batched_tokens,
            long_prefill=cfg.long_prefill_token_threshold,
            prefix=PrefixCache(int(cfg.prefix_cache_gb * 2**30)) if cfg.prefix_cache_gb > 0 else None,
            keep_taps=decoder._eagle3.taps if decoder._eagle3 is not None else (),
        )
        if self.scheduler.unbatched and cfg.max_batch > 1:  # the run stores what ran, and the log says why
            log.warning(f"{self.scheduler.unbatched}: rows decode one at a time (--max-batch {cfg.max_batch} -> 1)")
            cfg.max_batch = 1
        self.run_id: int | None = None
        self.packed = "off"
        self.attention = ""  # a decode step's attention (engine.decode.fast_attention), once warmed
        self._finished: queue.Queue[Finished] = queue.Queue()
        self.scheduler.subscribe(Ended(self._finished))  # first: a request is queued to be recorded before answered
        self.client = EngineClient(self.scheduler)
        self._stop = threading.Event()
        self._recorded = threading.Event()
        self._threads: list[threading.Thread] = []
        self._seq = 0
        self.shadow = Shadow(decoder, cfg.shadow_rate, cfg.seed)  # finished requests re-decoded target-only
        self.recorder: Recorder | None = None  # once the run is open
        self.profile_warnings: list[str] = []
        self._profile_rows: DynamicCache | None = None
        self._profile_batch: BatchCache | None = None
        self.stats: Counter[str] = Counter()  # requests finished, cancelled, refused: what /health reports
        self._stats_lock = threading.Lock()  # the recorder's thread and the HTTP thread both count
        self._answering = 0
        self.warmed: list[int] = []
        self.startup_s: dict[str, float] = {}
        self.cpu = CpuMeter()  # started again when the server is ready: loading and profiling are not serving

    # lifecycle ----------------------------------------------------------------------
    def start(self, loop_thread: bool = True) -> None:
        """Profile, open the run, start the recorder and (``loop_thread``) the batching loop on its own thread.
        Without it the caller runs ``run_loop`` itself, on the main thread: measured here, torch's forwards cost
        40-75% more on a thread other than the one that first ran them (SmolLM2, 2-core AMD EPYC, 2026-12-01), so
        the command-line server keeps the loop on the main thread and HTTP on another."""
        self.packed = pack_pair(self.decoder.pair, self.cfg.pack)
        started = time.perf_counter()
        self.warmed = self._warm()
        self.attention = fast_attention.describe(self.decoder.pair.dtype)
        self.startup_s["warm"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        if self.cfg.profile:
            batches = [b for b in (1, 2, 4, 8, 16, 32, 64) if b <= self.cfg.max_batch] or [1]
            widths = sorted({1, 2, 3, 4, 5, self.cfg.k_max + 1} & set(range(1, self.cfg.k_max + 2)))
            self.tuner.cost, self.profile_warnings = profile_cost(
                self._timed_forward, batches, widths, repeats=3, say=log.info
            )
            for warning in self.profile_warnings:
                log.warning(warning)
            self._profile_rows = self._profile_batch = None
        self.startup_s["profile"] = round(time.perf_counter() - started, 1)
        self.metrics.prepare(self.model_name, self.cfg.k_max, [])
        self.metrics.describe_cache(self.kv_blocks, self.decoder.pair.dtype, self.scheduler.prefix is not None)
        if self.store is not None:
            for line in replay_spills(self.store):  # rows an earlier server could not record
                log.warning(line)
            pair = self.decoder.pair
            run = self.store.create_run(
                self.cfg.name or f"phoenix serve {self.drafter} (max batch {self.cfg.max_batch})",
                {
                    "phoenix_serve": stored_config(self.cfg),
                    "drafter": self.drafter,
                    "cost_profile": self.tuner.cost.as_rows(),
                    "cost_profile_warnings": self.profile_warnings,
                    "pack": self.packed,  # whether the linear weights ran prepacked (engine.decode.packed)
                    "runner": pair.runner,  # what ran the forwards (engine.decode.runner)
                    "attention": self.attention,  # a decode step's: Phoenix's kernel or SDPA, and why
                    "models": pair.cards(),  # each model's card: family, size, vocabulary, source and hash
                    "warmed": self.warmed,  # the token counts every forward ran once before the first request
                    "startup_s": self.startup_s,
                    "environment": environment(),  # the CPU every figure of this run was measured on
                },
                pair.target_name,
                pair.draft_name,
                0,
            )
            self.run_id = run.id
            self.store.merge_config(
                run.id, runspec.recorded(run, ["phoenix-none_live", f"phoenix-{self.drafter}-auto_live"])
            )
            self.recorder = Recorder(self.store, run.id, spill_path(self.store, run.id))
        self.cpu = CpuMeter()  # served from here: its CPU is the traffic's
        self._threads = [threading.Thread(target=self._record_loop, name="phoenix-recorder", daemon=True)]
        if loop_thread:
            self._threads.append(threading.Thread(target=self.run_loop, name="phoenix-loop", daemon=True))
        for t in self._threads:
            t.start()

    def run_loop(self) -> None:
        """The batching loop, until ``stop`` is asked and nothing admitted or waiting is left. Should the loop itself
        fail (no request explains it), every request it held ends ``aborted`` and is recorded, ``/health`` answers
        503 with the reason, and the run ends ``failed``."""
        try:
            self.scheduler.run(self._stop, idle=self.shadow.check_one)
        except Exception:
            log.error("the decoding loop stopped: %s", self.scheduler.dead)

    def not_ready(self) -> str | None:
        """Why the server should get no new request now (None: ready)."""
        if self.dead:
            return f"the decoding loop stopped: {self.dead}"
        if self.run_id is None and self.store is not None or not self._threads:
            return "warming up"
        if self._stop.is_set():
            return "draining: the server is stopping"
        refusing = self.recorder.refusing if self.recorder is not None else None
        return f"the server cannot record requests now: {refusing}" if refusing else None

    @property
    def dead(self) -> str | None:
        """Why the decoding loop stopped for good; None while it runs."""
        return self.scheduler.dead

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self, timeout_s: float = 600.0) -> None:
        """Drain: what was admitted or waits finishes and is recorded; then the run is done."""
        self._stop.set()
        for t in self._threads[1:]:
            t.join(timeout_s)  # the loop's thread, where it has one
        self._recorded.set()
        self._threads[0].join(timeout_s)
        if self.store is not None and self.run_id is not None:
            lost = self.recorder.lost(self._finished.qsize()) if self.recorder is not None else None
            if self.dead and self.dead == self.scheduler.ending and not lost:  # a shutdown ended what was held
                self.store.set_status(self.run_id, "interrupted", self.scheduler.ending)
            elif self.dead or lost:  # a run whose rows did not all reach the store never ends done
                why = "; ".join(w for w in (self.dead and f"the decoding loop stopped: {self.dead}", lost) if w)
                self.store.set_status(self.run_id, "failed", why)
            else:
                self.store.set_status(self.run_id, "done")
        self.telemetry.flush()

    def _warm(self) -> list[int]:
        """Every token count a step can run up to WARM_TOKENS, through the target and a draft model, before the first
        request: a server's first sweep then costs what its second does (engine.decode.runner.warm). transformers'
        modeling has no buckets to warm."""
        pair, budget = self.decoder.pair, self.cfg.max_num_batched_tokens
        if not isinstance(pair.target, Runner):
            return []
        upto = min(budget, WARM_TOKENS)
        log.info(f"warming every forward shape up to {upto} tokens")
        sizes = warm(pair.target, upto)
        if isinstance(pair.draft, Runner):
            warm(pair.draft, max(self.cfg.max_batch * (self.cfg.k_max + 1), self.cfg.long_prefill_token_threshold))
        if self.decoder._eagle3 is not None:  # the head's prompt pass too: the first sweep then costs the second's
            warm_head(self.decoder._eagle3)
        return sizes

    def _timed_forward(self, b: int, n: int, context: int = 128) -> float:
        """One batched verify of ``b`` rows x ``n`` tokens on ``context`` cached tokens, timed (the cost grid). The
        rows are prefilled once per batch size; each timed verify is cropped off again."""
        target = self.decoder.pair.target
        with torch.inference_mode():
            if self._profile_rows is None:
                cache = DynamicCache(config=target.config)
                ids = torch.arange(1, context + 1, device=target.device)[None, :]
                target(input_ids=ids, cache=cache, use_cache=True)
                self._profile_rows = cache
            if self._profile_batch is None or self._profile_batch.rows != b:
                self._profile_batch = BatchCache.empty(target.device)
                for _ in range(b):
                    self._profile_batch.add_row(copy.deepcopy(self._profile_rows), context)
            batch = self._profile_batch
            start = time.perf_counter()
            verify_batch(target, batch, [[1] * n for _ in range(b)])
            seconds = time.perf_counter() - start
            batch.cache.crop(-n)
            batch.valid, batch.lengths = batch.valid[:, :-n], [context] * b
            return seconds

    def count(self, kind: str) -> None:
        with self._stats_lock:
            self.stats[kind] += 1

    def answered(self, delta: int) -> None:
        """An HTTP answer begins (+1) or has been handed to its client whole (-1): a shutdown waits for them."""
        with self._stats_lock:
            self._answering += delta

    def answering(self) -> bool:
        with self._stats_lock:
            return self._answering > 0

    # requests -----------------------------------------------------------------------
    def submit(self, req: Request, tokens: bool = False) -> RequestStream:
        """Queue a request through the engine client (QueueFull beyond --max-queue); its stream (``tokens``: with
        each step's tokens, else only its end). It is handed to the recorder before its stream hears the end."""
        refusing = self.recorder.refusing if self.recorder is not None else None
        if refusing:  # answering work it cannot record is what the server must not do
            raise RuntimeError(f"the server cannot record requests now: {refusing}")
        stream = self.client.submit(req, tokens)
        self.gauges()
        return stream

    @property
    def kv_blocks(self) -> int:
        """The KV blocks the loop holds for its rows: --max-batch rows of the model's context, BLOCK_SIZE tokens a
        block (the protocol's num_gpu_blocks)."""
        ctx = getattr(self.decoder.pair.target.config, "max_position_embeddings", None) or 1 << 16
        return self.cfg.max_batch * -(-ctx // BLOCK_SIZE)

    def gauges(self) -> None:
        """Set the gauges a router reads from the loop's state now (a scrape calls this first)."""
        running, waiting = self.scheduler.load
        used = sum(-(-n // BLOCK_SIZE) for n in self.scheduler.held_by_row)
        self.metrics.load(self.model_name, running, waiting, min(1.0, used / self.kv_blocks))

    def speculation(self, f: Finished) -> dict:
        """What speculation did for one request, as its response reports it (llama.cpp's ``timings``, richer)."""
        s = f.stats
        return {
            "drafter": f.request.drafter if f.request.drafter != "none" else None,
            "variant": variant(f.request.drafter, f.request.k),
            "arms": {str(k): n for k, n in sorted(Counter(s.k_per_pass).items())},
            "passes": s.passes,
            "proposed": s.proposed,
            "accepted": s.accepted,
            "acceptance": s.acceptance,
            "per_position": [asdict(p) for p in s.positions],
            "per_source": s.per_source,  # a hybrid's passes by the source that drafted them; None otherwise
            "switched_off": f.switched_off,  # each time its own acceptance held it at k = 0, with the figures
            "batch_size_mean": sum(f.batch_sizes) / len(f.batch_sizes) if f.batch_sizes else None,
            "batch_size_max": max(f.batch_sizes, default=None),
            "queue_s": f.queue_s,
            "prefill_s": s.prefill_s,
            "draft_prefill_s": s.draft_prefill_s,
            "draft_s": s.draft_s,
            "verify_s": s.verify_s,
            "ttft_s": s.ttft_s,
            "latency_s": s.latency_s,
        }

    def record(self, f: Finished) -> RequestRecord:
        self._seq += 1
        return served_record(f, self.run_id or 0, self._seq, self.decoder.pair.tokenizer, self.decoder.text(f.stats))

    # the recorder thread ------------------------------------------------------------
    def _record_loop(self) -> None:
        """Until the run ends: finished requests to the recorder, and the run's heartbeat. Nothing here may end the
        thread (a heartbeat that met a locked, full or read-only database once did, and every later answer went
        unrecorded while /health said ok): a failure is the recorder's error, and the next pass tries again."""
        beat = time.monotonic()
        while True:
            try:
                batch = self._drain(timeout_s=0.25)
                self._write(batch)
                if self.store is not None and self.run_id is not None and time.monotonic() - beat > HEARTBEAT_S:
                    beat = time.monotonic()
                    self.store.heartbeat(self.run_id)
                    self.store.merge_config(self.run_id, {"serve_cpu": self.cpu.record()})
                    if self.recorder is not None:
                        self.recorder.check()
                if self._recorded.is_set() and self._finished.empty():
                    self._write(self._drain(timeout_s=0.0), everything=True)
                    if self.store is not None and self.run_id is not None:
                        self.store.merge_config(self.run_id, {"serve_cpu": self.cpu.record()})
                    return
            except Exception as exc:  # noqa: BLE001 -- the store's failures are many; none may stop the recorder
                log.error("the recorder met %s: %s; it goes on", type(exc).__name__, exc)
                if self.recorder is not None:
                    self.recorder.fail(exc)
                time.sleep(0.25)

    def _drain(self, timeout_s: float) -> list[Finished]:
        out = []
        try:
            out.append(self._finished.get(timeout=timeout_s) if timeout_s else self._finished.get_nowait())
            while True:
                out.append(self._finished.get_nowait())
        except queue.Empty:
            return out

    def _write(self, finished: list[Finished], everything: bool = False) -> None:
        records = []
        for f in finished:
            rec = self.record(f)
            if not self.shadow.hold(f, rec):  # a held one is written once the idle loop has checked it
                records.append(rec)
            self.count("cancelled" if f.cancelled else "failed" if f.failed else "finished")
            self.cpu.add(f.stats.output_tokens)
            if f.failed:
                log.error("request %s %s: %s", f.request.id, f.reason, f.error)
            if f.cancelled:  # its drafts were verified all the same: /metrics counts them as the record does
                self.metrics.count_drafts(rec, self.model_name)
            if not f.cancelled and not f.failed:
                self.metrics.observe(rec, self.model_name)
                self.metrics.observe_served(
                    self.model_name, f.stats.ttft_s, f.stats.latency_s, f.queue_s, f.stats.output_tokens
                )
                pair = self.decoder.pair
                with self.telemetry.request(
                    rec.mode, rec.k, rec.run_id, pair.target_name, pair.draft_name, rec.trace_id or ""
                ) as txn:
                    self.telemetry.finish_request(txn, rec)
        records += self.shadow.ready(everything)
        self.gauges()
        steps = [self.scheduler.steps.popleft() for _ in range(len(self.scheduler.steps))]
        if self.recorder is not None:
            done = self.stats["finished"] + self.stats["cancelled"] + self.stats["failed"]
            self.recorder.write(steps, records, done)  # retried, held and spilled; never dropped
