"""`import PATH...`: what the field's own tools measured, as Phoenix runs (engine.imports)."""

from __future__ import annotations

from pathlib import Path

from engine.cli.options import add_db, open_store
from engine.config import add_options, from_args
from engine.imports.config import ImportConfig


def cmd_import(args) -> int:
    from engine.imports.importer import import_files  # lazy: pandas and the store, kept off --help

    ids = import_files(open_store(args.db), from_args(ImportConfig, args), [Path(p) for p in args.paths])
    print(f"imported {len(ids)} run(s): {', '.join(f'#{i}' for i in ids)}; open them on the dashboard's Sweeps page")
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
