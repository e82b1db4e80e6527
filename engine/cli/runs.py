"""`bench`, `runs`, `show`, `export` and `db upgrade`: runs in the foreground and what the store holds."""

from __future__ import annotations

import csv
import os
import signal
import sys
from pathlib import Path

from db.migrate import upgrade
from db.store import Store, make_engine, resolve_url, safe_url
from engine.analysis.oracle import ORACLE_NOTE, oracle_lines
from engine.analysis.pass_cost import PASS_COST
from engine.analysis.regressions import (
    DISTURBED,
    INSUFFICIENT,
    REGRESSION,
    SUSPICIOUS,
    VERDICTS,
    disturbed,
    series_of,
    series_verdicts,
)
from engine.bench import fast
from engine.bench.config import BenchConfig, validate
from engine.bench.leaderboard import markdown as leaderboard_markdown
from engine.bench.report import (
    REPORT_BY,
    REPORT_FORMATS,
    csv_rows,
    format_table,
    markdown,
    oracle,
    pass_table,
    report,
    sources,
    spec_bench,
    summaries,
)
from engine.bench.setup import create_run
from engine.cli.options import (
    add_db,
    add_run_command,
    add_sentry,
    get_run,
    open_existing_store,
    open_store,
    start_telemetry,
)
from engine.config import add_options, from_args
from engine.errors import PhoenixError
from engine.export.files import EXPORT_FORMATS, export, export_sqlite
from engine.export.mlflow import MlflowTarget, export_run
from engine.modes import reference_mode
from engine.paths import RESULTS_DB
from engine.prompts.sets import load as load_prompts
from engine.queue.owned import Heartbeat, worker_id


def add_bench_options(p) -> None:
    add_options(p, BenchConfig)
    add_db(p)
    add_sentry(p)


def cmd_bench(args) -> int:
    from engine.bench.run import encode_all, load_decoder  # lazy: torch, kept off --help

    cfg = validate(from_args(BenchConfig, args))
    prompts = load_prompts(
        cfg.prompts, cfg.limit, cfg.limit_per_column
    )  # every input is checked before anything is written
    chosen = fast.line(fast.resolve(cfg))  # the path decides the dtype the pair loads in
    if chosen:
        print(chosen, file=sys.stderr)
    decoder = load_decoder(cfg)
    encode_all(decoder, prompts, cfg.max_new_tokens, cfg.prompt_format)
    telemetry = start_telemetry(args)
    store = open_store(args.db)
    run = create_run(store, cfg)
    print(f"run {run.id}: {run.name} ({run.progress_total} requests)", file=sys.stderr)
    return execute_and_report(store, run.id, cfg, decoder=decoder, telemetry=telemetry)


def _terminate(signum, frame):
    raise KeyboardInterrupt  # SIGTERM ends a run as Ctrl-C does: rows flushed, status interrupted


def execute_and_report(store: Store, run_id: int, cfg: BenchConfig, **kwargs) -> int:
    from engine.bench.run import execute  # lazy: torch, kept off --help

    previous = signal.signal(signal.SIGTERM, _terminate)
    store.attach(run_id, worker_id())
    try:
        with Heartbeat(store, run_id):
            status = execute(store, run_id, cfg, **kwargs)
    except KeyboardInterrupt:
        print(
            f"run {run_id} interrupted; its rows are kept (`python -m engine resume {run_id}` continues it)",
            file=sys.stderr,
        )
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(report(store, run_id))
    board = spec_bench(store, run_id)
    if not board.empty:  # a Spec-Bench run: the leaderboard's shape too
        print("\n" + leaderboard_markdown(board))
    info = store.get_run(run_id)
    compiled = info.config.get("compile") if info is not None else None
    if compiled:
        print(
            f"compile: {_compile_state(compiled)}; "
            f"warm-up {compiled['warmup_s']:.1f} s, {compiled['graphs']} graphs, {compiled['recompiles']} "
            f"recompiles after the warm-up, {compiled['graph_breaks']} graph breaks",
            file=sys.stderr,
        )
    print(f"run {run_id}: {status}", file=sys.stderr)
    return 0


def _compile_state(compiled: dict) -> str:
    if not compiled["compiled"]:
        return "failed, ran eager: " + str(compiled["error"])
    return "on, weights frozen" if compiled.get("frozen") else "on"


def cmd_runs(args) -> int:
    for r in open_store(args.db).list_runs():
        if (r.archived and not args.archived) or (args.tag and args.tag not in r.tags):
            continue
        # a served run has no total: "16 req", not "16/0"; no draft is "none", not None
        done = f"{r.progress_done}/{r.progress_total}" if r.progress_total else f"{r.progress_done} req"
        print(
            f"{r.id:>5}  {r.status:<12} {done:>11} {r.created_at:%Y-%m-%d %H:%M}  "
            f"{r.name}  [{r.target} / {r.draft or 'none'}]"
            + (f"  #{' #'.join(r.tags)}" if r.tags else "")
            + ("  (archived)" if r.archived else "")
        )
    return 0


def cmd_show(args) -> int:
    store = open_store(args.db)
    run = get_run(store, args.run)
    print(f"run {run.id}: {run.name} [{run.status}] target={run.target} draft={run.draft}")
    if run.error:
        print(f"error: {run.error}")
    print(report(store, run.id))
    return 0


def cmd_export(args) -> int:
    store = open_store(args.db)
    get_run(store, args.run)
    if args.to == "mlflow":
        target = MlflowTarget(tracking_uri=args.tracking_uri or MlflowTarget.tracking_uri, experiment=args.experiment)
        done = export_run(store, args.run, target)
        print(
            f"run {args.run} {'updated in' if done['updated'] else 'exported to'} MLflow run {done['run_id']} "
            f"(experiment {target.experiment!r}, {done['params']} new params, {done['metrics']} metric points)",
            file=sys.stderr,
        )
        return 0
    if args.format == "sqlite":
        if not args.out:
            raise PhoenixError("--format sqlite writes a file: pass --out RUN.db")
        check_out(args.out)
        if Path(args.out).exists():
            raise PhoenixError(f"--out {args.out} exists; an export never replaces a file: choose a new path")
        n = export_sqlite(store, args.run, Path(args.out))
        print(f"run {args.run}: {n} requests written to {args.out}", file=sys.stderr)
        return 0
    if args.out:
        check_out(args.out)
    text = export(store, args.run, args.format)
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise PhoenixError(f"cannot write --out {args.out} ({exc.strerror}); choose a writable file path") from None
    else:
        sys.stdout.write(text)
    return 0


def check_out(out: str) -> None:
    """Before reading any row: the place the export goes must take a file."""
    path = Path(out)
    if path.is_dir():
        raise PhoenixError(f"--out {out} is a folder; give a file path inside it")
    if not path.parent.is_dir():
        raise PhoenixError(f"--out {out}: the folder {path.parent} does not exist; create it first")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise PhoenixError(f"cannot write --out {out}: not writable; choose a writable file path")


def cmd_report(args) -> int:
    store = open_store(args.db)
    run = get_run(store, args.run)
    if args.by == "column":
        return _report_columns(store, run.id, args.format)
    if args.by == "pass":
        return _report_passes(store, run.id, args.format)
    if args.by in ("oracle", "source"):
        return _report_frame(store, run.id, args.by, args.format)
    rows = summaries(store, run.id)
    if args.format == "md":
        print(markdown(run, rows))
    elif args.format == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=list(csv_rows(rows)[0]) if rows else ["mode"])
        writer.writeheader()
        writer.writerows(csv_rows(rows))
    else:
        print(format_table(rows))
        lines = oracle_lines(oracle(store, run.id), reference_mode(m.mode for m in rows))
        if lines:
            print("\n" + "\n".join(lines))
    return 0


def _print_table(table, fmt: str, note: str = "") -> int:
    """A report table in the chosen format; its definition (``note``) on stderr, apart from what a pipe reads."""
    if fmt == "md":
        print(table.to_markdown(index=False, floatfmt=".3f"))
    elif fmt == "csv":
        table.to_csv(sys.stdout, index=False)
    else:
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if note:
        print(f"\n{note}.", file=sys.stderr)
    return 0


def _report_frame(store, run_id: int, by: str, fmt: str) -> int:
    """The oracle table or the hybrid's per-source table, in any of the formats."""
    table = oracle(store, run_id) if by == "oracle" else sources(store, run_id)
    if table.empty:
        need = "two or more fixed modes on the same prompts" if by == "oracle" else "a hybrid_<k> mode"
        raise PhoenixError(f"run {run_id} has no {by} table: it needs {need}")
    return _print_table(table, fmt, ORACLE_NOTE if by == "oracle" else "")


def _report_passes(store, run_id: int, fmt: str) -> int:
    table = pass_table(store, run_id)
    if table.empty:
        raise PhoenixError(f"run {run_id} has no pass costs: it needs a reference mode and modes that drafted")
    return _print_table(table, fmt, PASS_COST)


def _report_columns(store, run_id: int, fmt: str) -> int:
    table = spec_bench(store, run_id)
    if table.empty:
        raise PhoenixError(
            f"run {run_id} has no per-column table: it needs Spec-Bench prompts and a target mode; use --by mode"
        )
    if fmt == "md":
        print(leaderboard_markdown(table))
    elif fmt == "csv":
        table.to_csv(sys.stdout, index=False)
    else:
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_db_upgrade(args) -> int:
    url = resolve_url(args.db)
    make_engine(url).dispose()
    print(f"{safe_url(url)} is at schema {upgrade(url, allow_foreign_tables=args.allow_foreign_tables)}")
    return 0


def cmd_regressions(args) -> int:
    store = open_existing_store(args.db)
    specs: dict = {}
    stored = store.list_runs()
    series = series_of(stored, lambda run_id: summaries(store, run_id), specs)
    if not series:  # a mistyped --db or an empty store once passed the CI gate: nothing judged is no verdict
        raise PhoenixError(f"{safe_url(store.url)} holds no finished run to judge: check --db")
    verdicts = series_verdicts(series, specs)
    counts = {v: sum(1 for x in verdicts if x.verdict == v) for v in VERDICTS}
    judged = {v.key for v in verdicts if v.verdict != INSUFFICIENT}
    print(
        ", ".join(f"{n} {v}" for v, n in counts.items())
        + f" over {len(verdicts)} figures of {len(series)} series; {len(judged)} series had enough points to judge "
        "(the PyTorch HUD's rule)"
    )
    left_out = sorted(r.id for r in stored if disturbed(r))
    if left_out:
        print(
            f"{len(left_out)} runs tagged '{DISTURBED}' left out (measured on a machine known to run slower; each "
            f"run's note says how): {_ranges(left_out)}"
        )
    for v in verdicts:
        if v.verdict in (REGRESSION, SUSPICIOUS):
            ratios = ", ".join("n/a" if r != r else f"{r:.2f}x" for r in v.ratios)
            runs = ", ".join(f"#{i}" for i in v.run_ids[-2:])
            said = v.spec.key_text() if v.spec is not None else str(v.key)
            newest = ", ".join(f"{p.value:.4g}" for p in v.points[-2:])
            print(f"{v.verdict:<12} {v.figure:<17} {said}: newest {newest} ({ratios}) against the baseline "
                  f"{v.baseline:.4g}, runs {runs}")  # fmt: skip
    return 1 if args.exit_code and counts[REGRESSION] else 0


def _ranges(ids: list[int]) -> str:
    """#3-#5, #9: sorted run ids as runs of consecutive ids."""
    parts: list[str] = []
    start = prev = ids[0]
    for i in [*ids[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(f"#{start}" if start == prev else f"#{start}-#{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(parts)


def cmd_docs(args) -> int:
    from engine.export.published import generate  # lazy: the analysis stack, kept off --help

    return generate(open_existing_store(args.db or str(RESULTS_DB)), check=args.check)


def add_commands(sub) -> None:
    docs = sub.add_parser(
        "docs", help="README's and the findings' generated figures from their runs (--check: exit 1 where one differs)"
    )
    docs.add_argument("--db", default=None, help="the runs the figures come from (default: benchmarks/results.db)")
    docs.add_argument("--check", action="store_true", help="write nothing; exit 1 when a published figure differs")
    docs.set_defaults(func=cmd_docs)
    g = sub.add_parser(
        "regressions",
        help="every series of runs (model, engine, setting, prompts, CPU) judged by the PyTorch HUD's rule",
    )
    add_db(g)
    g.add_argument("--exit-code", action="store_true", help="exit 1 when a series regressed (for CI)")
    g.set_defaults(func=cmd_regressions)
    b = sub.add_parser("bench", help="run modes through the same prompts and record every request")
    add_bench_options(b)
    b.set_defaults(func=cmd_bench)
    r = sub.add_parser("runs", help="list runs")
    add_db(r)
    r.add_argument("--tag", default="", help="only runs with this tag")
    r.add_argument("--archived", action="store_true", help="include archived runs")
    r.set_defaults(func=cmd_runs)
    add_run_command(sub, "show", "print a stored run's results table", cmd_show)
    rp = add_run_command(
        sub,
        "report",
        "a run's results: per mode, tokens/s, paired speedup (median, IQR), acceptance and identity",
        cmd_report,
    )
    rp.add_argument("--format", choices=REPORT_FORMATS, default="table", help="table (terminal), md or csv")
    rp.add_argument(
        "--by",
        choices=REPORT_BY,
        default="mode",
        help="mode: the results table; column: Spec-Bench's leaderboard (speedup, n and Welch's p per "
        "column group, mean accepted tokens); pass: per drafting mode, tokens per pass, the pass's cost in "
        "reference tokens and the acceptance it would need to pay (a serving engine's break-even); oracle: "
        "the best fixed mode per prompt in hindsight and every mode's share of it; source: a hybrid's passes "
        "by the source that drafted them",
    )
    e = add_run_command(sub, "export", "write a run's requests as CSV or JSON, or the run as a SQLite file", cmd_export)
    e.add_argument("--format", choices=EXPORT_FORMATS, default="csv")
    e.add_argument("--out", default=None, help="file to write (required for sqlite; never replaced)")
    e.add_argument(
        "--to",
        choices=("file", "mlflow"),
        default="file",
        help="file: --format to stdout or --out; mlflow: the run into an MLflow tracking store "
        "(requirements-mlflow.txt)",
    )
    e.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite under data/mlflow.db)")
    e.add_argument("--experiment", default="phoenix", help="MLflow experiment name")
    d = sub.add_parser("db", help="database schema")
    dsub = d.add_subparsers(dest="db_command", required=True)
    u = dsub.add_parser("upgrade", help="apply migrations up to head")
    add_db(u)
    u.add_argument(
        "--allow-foreign-tables",
        action="store_true",
        help="add Phoenix's tables to a database that already holds other tables",
    )
    u.set_defaults(func=cmd_db_upgrade)
