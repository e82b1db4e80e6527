"""`import PATH...`: what the field's own tools measured, as Phoenix runs (engine.imports); `lm-eval`: the
harness's answers through Phoenix's server, each drafter against the first (engine.engines.lm_eval)."""

from __future__ import annotations

from pathlib import Path

from engine.cli.options import add_db, open_store
from engine.config import add_options, from_args
from engine.engines.lm_eval import LmEvalConfig
from engine.imports.config import ImportConfig


def cmd_import(args) -> int:
    from engine.imports.importer import import_files  # lazy: pandas and the store, kept off --help

    ids = import_files(open_store(args.db), from_args(ImportConfig, args), [Path(p) for p in args.paths])
    print(f"imported {len(ids)} run(s): {', '.join(f'#{i}' for i in ids)}; open them on the dashboard (Sweeps, Run)")
    return 0


def cmd_lm_eval(args) -> int:
    from engine.imports.quality import evaluate  # lazy: the store and the harness, kept off --help

    evaluate(open_store(args.db), from_args(LmEvalConfig, args))
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser(
        "import",
        help="import results measured by the field's tools (vllm bench serve --save-result --save-detailed; a "
        "Prometheus scrape of a server's spec-decode counters) as runs",
    )
    p.add_argument(
        "paths", nargs="+", help="result files; every level of every file (every scrape) is one run, stored together"
    )
    add_options(p, ImportConfig)
    add_db(p)
    p.set_defaults(func=cmd_import)
    q = sub.add_parser(
        "lm-eval",
        help="answer quality through a running Phoenix server by lm-evaluation-harness (HumanEval, pass@1), each "
        "drafter asked for per request; every result imported as a run and compared with the first drafter's",
    )
    add_options(q, LmEvalConfig)
    add_db(q)
    q.set_defaults(func=cmd_lm_eval)
