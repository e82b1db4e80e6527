"""The worker: claims queued runs and executes them with the bench runner.

Model work never runs in the Streamlit script thread. A run survives the browser
tab closing because it lives in this process and in the database.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import nullcontext

from db.store import Store
from engine.bench.config import BenchConfig, stored, validate
from engine.bench.run import execute, load_decoder
from engine.decode.decoder import Decoder
from engine.decode.fetch import ensure_present
from engine.errors import PhoenixError
from engine.modes import Mode
from engine.observe.prometheus import Metrics
from engine.queue.config import WorkerConfig
from engine.queue.owned import Heartbeat, worker_id


def mode_arms(bench: BenchConfig) -> list[tuple[str, int]]:
    """(mode, k) pairs a run can record: a fixed mode its k, a bandit any of its arms."""
    pairs = []
    for mode in map(Mode.of, bench.modes):
        ks = sorted({a.k or 0 for a in bench.arm_modes()}) or bench.arms
        pairs += [(mode.text, k) for k in ks] if mode.is_bandit else [(mode.text, mode.k or 0)]
    return pairs


class CancelCheck:
    """Reads the cancel flag at request boundaries, at most once a second."""

    def __init__(self, store: Store, run_id: int):
        self.store, self.run_id, self.last, self.value = store, run_id, 0.0, False

    def __call__(self) -> bool:
        now = time.monotonic()
        if not self.value and now - self.last >= 1.0:
            self.last = now
            self.value = self.store.cancel_requested(self.run_id)
        return self.value


class Worker:
    def __init__(self, store: Store, cfg: WorkerConfig | None = None, log=print, telemetry=None):
        self.store, self.cfg, self.log, self.telemetry = store, cfg or WorkerConfig(), log, telemetry
        self.id = worker_id()
        self.current: int | None = None  # the run in progress, if any
        self._decoder: Decoder | None = None
        self._decoder_key: tuple | None = None
        self.metrics = None
        if self.cfg.metrics_port is not None:
            self.metrics = Metrics()
            self.metrics_server, _ = self.metrics.serve(self.cfg.metrics_port, self.cfg.metrics_addr)
            self.log(
                f"worker {self.id}: Prometheus metrics on http://{self.cfg.metrics_addr}:"
                f"{self.metrics_server.server_address[1]}/metrics"
            )

    def decoder_for(self, bench: BenchConfig):
        """Models stay loaded between runs that use the same pair."""
        key = (bench.target, bench.draft, bench.device, bench.dtype, bench.allow_pickle)
        if key != self._decoder_key:
            self._decoder, self._decoder_key = None, None
            self._decoder = load_decoder(bench)
            self._decoder_key = key
        return self._decoder

    def prepare(self, run_id: int, bench: BenchConfig) -> None:
        """Fetch a named model the run needs and this machine lacks, saying each stage on the run's page."""

        def say(text: str) -> None:
            self.store.merge_config(run_id, {"preparing": text})
            self.log(f"worker {self.id}: run {run_id}: {text}")

        fetched = [name for name in (bench.target, bench.draft) if ensure_present(name, say)]
        if fetched:
            self.store.merge_config(run_id, {"preparing": None, "fetched": fetched})

    def take_next(self) -> int | None:
        self.store.mark_stale(self.cfg.stale_after_s)
        run = self.store.claim_next(self.id)
        if run is None:
            return None
        self.log(f"worker {self.id}: run {run.id} ({run.name})")
        self.current = run.id
        try:
            bench = validate(stored(run.config))
            with Heartbeat(self.store, run.id):
                if self.metrics:
                    self.metrics.prepare(
                        bench.target, max(bench.arms + [m.k or 0 for m in map(Mode.of, bench.modes)]), mode_arms(bench)
                    )
                self.prepare(run.id, bench)
                decoder = self.decoder_for(bench)
                metrics = self.metrics
                observe = (lambda rec, _stats: metrics.observe(rec, bench.target)) if metrics else None
                with (
                    self.metrics.running.labels(bench.target, "0").track_inprogress() if self.metrics else nullcontext()
                ):
                    status = execute(
                        self.store,
                        run.id,
                        bench,
                        decoder=decoder,
                        progress=False,
                        should_stop=CancelCheck(self.store, run.id),
                        on_request=observe,
                        telemetry=self.telemetry,
                    )
            self.log(f"worker {self.id}: run {run.id} {status}")
        except PhoenixError as exc:
            self.store.set_status(run.id, "failed", str(exc))
            self.log(f"worker {self.id}: run {run.id} failed: {exc}")
        except Exception as exc:  # the run fails, the worker lives on for the next one
            msg = f"{type(exc).__name__}: {exc}"
            if (info := self.store.get_run(run.id)) and info.status == "running":
                self.store.set_status(run.id, "failed", msg)
            self.log(f"worker {self.id}: run {run.id} failed: {msg}")
        self.current = None
        return run.id

    def serve(self) -> None:
        idle_since = time.monotonic()
        while True:
            if self.orphaned():
                left = self.store.queued_count()
                self.log(
                    f"worker {self.id}: the dashboard that started it (pid {self.cfg.parent_pid}) has exited and "
                    f"no run is in progress; stopping"
                    + (f" ({left} queued runs wait for the next worker)" if left else "")
                )
                return
            done = self.take_next()
            if done is not None:
                idle_since = time.monotonic()
                if self.cfg.once:
                    return
                continue
            if self.cfg.max_idle_s is not None and time.monotonic() - idle_since > self.cfg.max_idle_s:
                return
            time.sleep(self.cfg.poll_s)

    def orphaned(self) -> bool:
        """Started by a dashboard that has exited: the worker was its child, so its parent is no longer that pid
        (a reused pid cannot fool this, as it could a liveness check)."""
        return self.cfg.parent_pid is not None and os.getppid() != self.cfg.parent_pid


def log_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
