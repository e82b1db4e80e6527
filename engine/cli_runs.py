"""CLI commands over the tracking store: bench, runs, show, export, db upgrade."""
from __future__ import annotations

import sys

from engine.errors import PhoenixError


def open_store(db: str | None, create_if_empty: bool = True):
    from db.migrate import ensure_schema
    from db.store import Store, resolve_url

    url = resolve_url(db)
    ensure_schema(url, create_if_empty=create_if_empty)
    return Store(url)


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise PhoenixError(f"--arms must be comma-separated integers, got {text!r}") from None


def bench_config(args):
    from engine.bench import BenchConfig

    return BenchConfig(
        target=args.target, draft=None if args.draft in ("none", "") else args.draft, drafter=args.drafter,
        prompts=args.prompts, limit=args.limit, max_new_tokens=args.max_new_tokens,
        modes=[m.strip() for m in args.modes.split(",") if m.strip()], arms=_int_list(args.arms),
        policy=args.policy, granularity=args.granularity, fallback=args.fallback,
        fallback_window=args.fallback_window, fallback_margin=args.fallback_margin,
        fallback_probe_every=args.fallback_probe_every,
        seed=args.seed, name=args.name or "", shadow_rate=args.shadow_rate, device=args.device, dtype=args.dtype,
        allow_pickle=args.allow_pickle,
    )


def cmd_bench(args) -> int:
    from engine.bench import validate
    from engine.bench_run import create_run, encode_all, load_decoder
    from engine.prompts import load as load_prompts

    cfg = validate(bench_config(args))
    prompts = load_prompts(cfg.prompts, cfg.limit)  # every input is checked before anything is written
    decoder = load_decoder(cfg)
    encode_all(decoder, prompts, cfg.max_new_tokens)
    telemetry = start_telemetry(args)
    store = open_store(args.db)
    run = create_run(store, cfg)
    print(f"run {run.id}: {run.name} ({run.progress_total} requests)", file=sys.stderr)
    return _execute_and_report(store, run.id, cfg, decoder=decoder, telemetry=telemetry)


def _execute_and_report(store, run_id: int, cfg, **kwargs) -> int:
    from engine.bench_run import execute, report

    try:
        status = execute(store, run_id, cfg, **kwargs)
    except KeyboardInterrupt:
        print(f"run {run_id} interrupted; its rows are kept (`python -m engine resume {run_id}` continues it)", file=sys.stderr)
        return 130
    print(report(store, run_id))
    print(f"run {run_id}: {status}", file=sys.stderr)
    return 0


def cmd_runs(args) -> int:
    store = open_store(args.db)
    for r in store.list_runs():
        print(f"{r.id:>5}  {r.status:<12} {r.progress_done:>5}/{r.progress_total:<5} {r.created_at:%Y-%m-%d %H:%M}  {r.name}  [{r.target} / {r.draft}]")
    return 0


def _get_run(store, run_id: int):
    run = store.get_run(run_id)
    if run is None:
        raise PhoenixError(f"no run {run_id}: see `python -m engine runs`")
    return run


def cmd_show(args) -> int:
    from engine.bench_run import report

    store = open_store(args.db)
    run = _get_run(store, args.run)
    print(f"run {run.id}: {run.name} [{run.status}] target={run.target} draft={run.draft}")
    if run.error:
        print(f"error: {run.error}")
    print(report(store, run.id))
    return 0


def cmd_export(args) -> int:
    from db.export import export

    store = open_store(args.db)
    _get_run(store, args.run)
    text = export(store, args.run, args.format)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_db_upgrade(args) -> int:
    from db.migrate import upgrade
    from db.store import make_engine, resolve_url, safe_url

    url = resolve_url(args.db)
    make_engine(url).dispose()
    print(f"{safe_url(url)} is at schema {upgrade(url)}")
    return 0


def _db_arg(p) -> None:
    p.add_argument("--db", default=None, help="SQLAlchemy URL or file path (default: $PHOENIX_DB or data/phoenix.db)")


def _sentry_args(p) -> None:
    p.add_argument("--sentry-dsn", default=None, help="Sentry DSN (default: $PHOENIX_SENTRY_DSN); never printed")
    p.add_argument("--sentry-environment", default=None)
    p.add_argument("--traces-sample-rate", type=float, default=None)
    p.add_argument("--no-profiling", action="store_true")
    p.add_argument("--acceptance-floor", type=float, default=None)


def start_telemetry(args):
    from engine.bench_run import git_sha
    from engine.telemetry import SentryConfig, init

    cfg = SentryConfig.from_env(dsn=getattr(args, "sentry_dsn", None), environment=getattr(args, "sentry_environment", None),
                                traces_sample_rate=getattr(args, "traces_sample_rate", None),
                                acceptance_floor=getattr(args, "acceptance_floor", None))
    if getattr(args, "no_profiling", False):
        cfg.profiling = False
    return init(cfg, release=git_sha())


def add_bench_options(p) -> None:
    from engine.cli import _add_model_args

    _add_model_args(p)
    _db_arg(p)
    p.add_argument("--drafter", default="model", choices=["model", "ngram"])
    p.add_argument("--prompts", default="humaneval-test")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--modes", default="target,fixed_4,bandit")
    p.add_argument("--arms", default="0,2,4,6,8")
    p.add_argument("--policy", default="epsilon_greedy",
                   help="policy of the plain 'bandit' mode: epsilon_greedy, ucb1, thompson, model_based, ema_hysteresis, "
                        "or contextual_<any of those>; modes 'bandit:<policy>[:pass]' compare several in one run")
    p.add_argument("--granularity", default="request", choices=["request", "pass"],
                   help="pass: k may change between verification passes of one request")
    p.add_argument("--fallback", action="store_true", help="drop to k=0 while speculation runs slower than target-only")
    p.add_argument("--fallback-window", type=int, default=8)
    p.add_argument("--fallback-margin", type=float, default=0.05)
    p.add_argument("--fallback-probe-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--name", default="")
    p.add_argument("--shadow-rate", type=float, default=0.1)
    _sentry_args(p)


def add_commands(sub) -> None:
    b = sub.add_parser("bench", help="run modes through the same prompts and record every request")
    add_bench_options(b)
    b.set_defaults(func=cmd_bench)
    r = sub.add_parser("runs", help="list runs")
    _db_arg(r)
    r.set_defaults(func=cmd_runs)
    s = sub.add_parser("show", help="print a stored run's results table")
    s.add_argument("run", type=int)
    _db_arg(s)
    s.set_defaults(func=cmd_show)
    e = sub.add_parser("export", help="write a run's requests as CSV or JSON")
    e.add_argument("run", type=int)
    e.add_argument("--format", choices=["csv", "json"], default="csv")
    e.add_argument("--out", default=None)
    _db_arg(e)
    e.set_defaults(func=cmd_export)
    d = sub.add_parser("db", help="database schema")
    dsub = d.add_subparsers(dest="db_command", required=True)
    u = dsub.add_parser("upgrade", help="apply migrations up to head")
    _db_arg(u)
    u.set_defaults(func=cmd_db_upgrade)
    add_queue_commands(sub)


def cmd_submit(args) -> int:
    from engine.bench import validate
    from engine.bench_run import create_run
    from engine.models import check_same_tokenizer_files, resolve
    from engine.prompts import load as load_prompts

    cfg = validate(bench_config(args))
    load_prompts(cfg.prompts, cfg.limit)
    target = resolve(cfg.target, "target")
    if cfg.draft:
        check_same_tokenizer_files(target, resolve(cfg.draft, "draft"), cfg.target, cfg.draft)
    store = open_store(args.db)
    run = create_run(store, cfg, status="queued")
    print(f"run {run.id} queued: {run.name} ({run.progress_total} requests)")
    return 0


def cmd_worker(args) -> int:
    import os

    from engine.metrics import parse_port
    from engine.worker import Worker, WorkerConfig, log_line

    port = (parse_port(args.metrics_port, "--metrics-port") if args.metrics_port is not None
            else parse_port(os.environ.get("PHOENIX_METRICS_PORT"), "PHOENIX_METRICS_PORT"))
    telemetry = start_telemetry(args)
    store = open_store(args.db)
    Worker(store, WorkerConfig(once=args.once, poll_s=args.poll, max_idle_s=args.max_idle, metrics_port=port),
           log=log_line, telemetry=telemetry).serve()
    return 0


def cmd_resume(args) -> int:
    from engine.bench import BenchConfig
    from engine.config import from_dict

    from engine.worker import STALE_AFTER_S

    store = open_store(args.db)
    store.mark_stale(STALE_AFTER_S)
    run = _get_run(store, args.run)
    if run.status in ("done", "running", "queued"):
        raise PhoenixError(f"run {run.id} is {run.status}; only interrupted, failed or cancelled runs resume")
    cfg = from_dict(BenchConfig, run.config.get("bench", {}))
    telemetry = start_telemetry(args)
    store.requeue(run.id)
    return _execute_and_report(store, run.id, cfg, telemetry=telemetry)


def cmd_cancel(args) -> int:
    store = open_store(args.db)
    _get_run(store, args.run)
    status = store.request_cancel(args.run)
    print(f"run {args.run}: {'cancel requested' if status == 'running' else status}")
    return 0


def add_queue_commands(sub) -> None:
    s = sub.add_parser("submit", help="queue a run for the background worker (same options as bench)")
    add_bench_options(s)
    s.set_defaults(func=cmd_submit)
    w = sub.add_parser("worker", help="the background engine: claim and execute queued runs")
    _db_arg(w)
    w.add_argument("--once", action="store_true", help="process one run and exit")
    w.add_argument("--poll", type=float, default=1.0)
    w.add_argument("--max-idle", type=float, default=None, help="exit after this many idle seconds")
    w.add_argument("--metrics-port", default=None,
                   help="serve Prometheus /metrics on 127.0.0.1:PORT (default: $PHOENIX_METRICS_PORT, else off)")
    _sentry_args(w)
    w.set_defaults(func=cmd_worker)
    r = sub.add_parser("resume", help="continue an interrupted, failed or cancelled run in this process")
    r.add_argument("run", type=int)
    _db_arg(r)
    _sentry_args(r)
    r.set_defaults(func=cmd_resume)
    c = sub.add_parser("cancel", help="cancel a queued or running run (rows are kept)")
    c.add_argument("run", type=int)
    _db_arg(c)
    c.set_defaults(func=cmd_cancel)
