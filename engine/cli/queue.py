"""`submit`, `worker`, `resume` and `cancel`: runs through the queue and its workers."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket

from db.entities import STALE_AFTER_S
from engine.bench.config import BenchConfig, stored, validate
from engine.cli.options import add_db, add_run_command, add_sentry, get_run, open_store, start_telemetry
from engine.cli.runs import add_bench_options, execute_and_report
from engine.config import add_options, from_args
from engine.errors import PhoenixError
from engine.observe.prometheus import parse_port
from engine.paths import DATA_DIR
from engine.prompts.sets import load as load_prompts
from engine.queue.autostart import register, stop_workers, worker_alive_here
from engine.queue.config import WorkerConfig


def cmd_submit(args) -> int:
    from engine.bench.setup import create_run  # lazy: the store, kept off --help
    from engine.decode.loading import check_same_tokenizer_files, resolve  # lazy: torch, kept off --help

    cfg = validate(from_args(BenchConfig, args))
    load_prompts(cfg.prompts, cfg.limit, cfg.limit_per_column)
    target = resolve(cfg.target, "target")
    if cfg.draft:
        check_same_tokenizer_files(target, resolve(cfg.draft, "draft"), cfg.target, cfg.draft)
    run = create_run(open_store(args.db), cfg, status="queued")
    print(f"run {run.id} queued: {run.name} ({run.progress_total} requests)")
    return 0


def cmd_worker(args) -> int:
    from engine.queue.worker import Worker, log_line  # lazy: torch, kept off --help

    cfg = from_args(WorkerConfig, args).validate()
    if cfg.stop:
        from db.store import resolve_url  # lazy: the store, kept off --help

        return stop(resolve_url(args.db))
    cfg.metrics_port = (
        parse_port(cfg.metrics_port, "--metrics-port")
        if cfg.metrics_port is not None
        else parse_port(os.environ.get("PHOENIX_METRICS_PORT"), "PHOENIX_METRICS_PORT")
    )
    telemetry = start_telemetry(args)
    store = open_store(args.db)
    worker = Worker(store, cfg, log=log_line, telemetry=telemetry)
    entry = register(DATA_DIR, store.url, os.getpid())
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        worker.serve()
    except KeyboardInterrupt:  # `worker --stop`, SIGTERM or Ctrl-C: a run in progress is interrupted, rows kept
        log_line(
            f"worker {worker.id}: stopped"
            + (
                f"; run {worker.current} interrupted, `python -m engine resume {worker.current}` continues it"
                if worker.current
                else ""
            )
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
        entry.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            entry.parent.rmdir()  # the last worker of this database leaves no empty folder behind
    return 0


def _terminate(signum, frame):
    raise KeyboardInterrupt


def stop(url: str) -> int:
    results = stop_workers(url)
    if not results:
        print("no worker serves this database on this host")
    for pid, stopped in results:
        print(
            f"worker {pid} stopped"
            if stopped
            else f"worker {pid} did not stop within 30 s; `kill -9 {pid}` ends it "
            "(its run then reads as interrupted once its heartbeat is stale)"
        )
    return 0 if all(stopped for _, stopped in results) else 1


def cmd_resume(args) -> int:
    store = open_store(args.db)
    store.mark_stale()
    run = get_run(store, args.run)
    if run.status == "running":
        run = take_over(store, run)
    if run.status in ("done", "running", "queued"):
        raise PhoenixError(f"run {run.id} is {run.status}; only interrupted, failed or cancelled runs resume")
    cfg = validate(stored(run.config))
    telemetry = start_telemetry(args)
    store.requeue(run.id)
    return execute_and_report(store, run.id, cfg, telemetry=telemetry)


def take_over(store, run):
    """A running run whose worker is provably gone (same host, no such process) is interrupted at once;
    otherwise say how long until its missing heartbeat makes it resumable."""
    host, _, pid = (run.worker_id or "").rpartition(":")
    if host == socket.gethostname() and pid.isdigit() and not worker_alive_here(run.worker_id or ""):
        store.interrupt_if_running(run.id, f"worker {run.worker_id} is gone; resumed")
        return get_run(store, run.id)
    from db.models import utcnow  # lazy: the store, kept off --help

    age = (utcnow() - run.heartbeat_at).total_seconds() if run.heartbeat_at else 0.0
    wait = max(1, math.ceil(STALE_AFTER_S - age))
    raise PhoenixError(
        f"run {run.id} is running (worker {run.worker_id or '?'}, last heartbeat {age:.0f} s ago); "
        f"cancel it, or retry in {wait} s if its worker died"
    )


def cmd_cancel(args) -> int:
    store = open_store(args.db)
    get_run(store, args.run)
    status = store.request_cancel(args.run)
    print(f"run {args.run}: {'cancel requested' if status == 'running' else status}")
    return 0


def add_commands(sub) -> None:
    s = sub.add_parser("submit", help="queue a run for the background worker (same options as bench)")
    add_bench_options(s)
    s.set_defaults(func=cmd_submit)
    w = sub.add_parser("worker", help="a worker: claim and execute queued runs")
    add_options(w, WorkerConfig)
    add_db(w)
    add_sentry(w)
    w.set_defaults(func=cmd_worker)
    add_sentry(
        add_run_command(sub, "resume", "continue an interrupted, failed or cancelled run in this process", cmd_resume)
    )
    add_run_command(sub, "cancel", "cancel a queued or running run (rows are kept)", cmd_cancel)
