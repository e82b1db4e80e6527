"""Write docs/results.md from the runs in the results database and the machine-level benchmark files.

Every figure about decoding comes from a run in the store (``benchmarks/results.db`` by default, kept in git),
so the dashboard opens each one: ``PHOENIX_DB=benchmarks/results.db streamlit run app/main.py``. The files in
``benchmarks/results/`` hold what is not a run: the dashboard's own timing, recording overhead, GPU shapes.

    python -m benchmarks.report [--db benchmarks/results.db] [--out docs/results.md] [--print]
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from pathlib import Path

from benchmarks.report_machine import divergence_md, machine_md
from benchmarks.serving_md import level_md, live_md
from db.entities import RunInfo
from db.migrate import ensure_schema
from db.store import Store, resolve_url
from engine.analysis.breakeven import predicted_speedup, rates
from engine.analysis.fit import fit_run, reached_of
from engine.analysis.regret import best_fixed, policy_table
from engine.analysis.speedup import speedups
from engine.bench.config import BenchConfig, stored
from engine.bench.leaderboard import markdown as leaderboard_md
from engine.bench.report import markdown, spec_bench, summaries
from engine.modes import Mode

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DB = ROOT / "benchmarks" / "results.db"
DOC = ROOT / "docs" / "results.md"
RESULTS_PORT = 8502  # the results database's own dashboard, beside your own on 8501
RESULTS_DASHBOARD_CMD = (
    f"PHOENIX_DB=benchmarks/results.db .venv/bin/streamlit run app/main.py --server.port {RESULTS_PORT}"
)
DASHBOARD = f"http://localhost:{RESULTS_PORT}"


def bench_command(b: BenchConfig) -> str:
    """The command that repeats a run: every setting that differs from the default, as its flag."""
    default = BenchConfig()
    flags = []
    # --fast chose the path (cache, compile, freeze and, for auto, the dtype): the command asks for --fast again
    chosen = {"cache", "compile", "freeze"} if b.fast != "off" else set()
    for f in dataclasses.fields(BenchConfig):
        value, base = getattr(b, f.name), getattr(default, f.name)
        if f.name in ("device", "dtype", "prompt_format", "max_new_tokens_cap", "max_prompts") or f.name in chosen:
            continue  # resolved at run time (auto) or form limits
        if isinstance(value, bool):
            if value != base:
                flags.append(f"--{f.name.replace('_', '-')}" if value else f"--no-{f.name.replace('_', '-')}")
            continue
        if dataclasses.is_dataclass(value):
            for g in dataclasses.fields(value):
                if getattr(value, g.name) != getattr(base, g.name):
                    flags.append(f"--{f.name}-{g.name}".replace("_", "-") + f" {getattr(value, g.name)}")
        elif value != base:
            text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            flags.append(
                f"--{f.name.replace('_', '-')} '{text}'" if " " in text else f"--{f.name.replace('_', '-')} {text}"
            )
    if b.dtype not in ("float32", "auto") and b.fast != "auto":
        flags.append(f"--dtype {b.dtype}")
    return "python -m engine bench " + " ".join(flags)


def per_position_md(store: Store, run_id: int) -> str:
    pos = store.positions(run_id)
    lines = []
    for mode, g in pos.groupby("mode", sort=False):
        if g["k"].nunique() > 1:  # a bandit's arms: the Run page draws each
            continue
        uncond, cond = rates(g["proposed"].astype(int).tolist(), g["accepted"].astype(int).tolist(), reached_of(g))
        lines.append(f"{mode}: " + " ".join(f"{u:.2f}" for u in uncond))
    return (
        ("Per-position acceptance (unconditional, vLLM's definition), position 0 first: " + "; ".join(lines) + ".")
        if lines
        else ""
    )


def c_with_prefill(totals, run_drafter: str = "model", drafter_arms: bool = False) -> float | None:
    """c as Phoenix computed it before migration 0016, with both prefills inside the pass times: how far the
    honest split moved it. The modes are the fit's (engine.analysis.fit)."""

    def fitted(mode: str) -> bool:
        m = Mode.of(mode)
        return m.drafts_with(run_drafter) and not (drafter_arms and m.is_bandit)

    target = totals[totals["mode"] == "target"]
    drafted = totals[totals["mode"].map(fitted)]
    if target.empty or drafted.empty or not target["passes"].sum() or not drafted["proposed"].sum():
        return None
    step = float((target["verify_s"].sum() + target["prefill_s"].fillna(0).sum()) / target["passes"].sum())
    draft = float(drafted["draft_s"].sum() + drafted["draft_prefill_s"].fillna(0).sum())
    return draft / float(drafted["proposed"].sum()) / step


def fit_md(store: Store, run_id: int) -> str:
    totals = store.arm_totals(run_id)
    bench = store.get_run(run_id).bench
    fit = fit_run(
        store.positions(run_id),
        totals,
        store.prompt_rewards(run_id),
        bench.drafter if bench else "model",
        drafter_arms=bool(bench and bench.drafter_arms),
    )
    if fit.a is None or fit.c is None or fit.target_step_s is None:
        return ""
    pred = predicted_speedup(fit.a, fit.c, fit.k_opt) if fit.k_opt is not None else None
    old = c_with_prefill(totals, bench.drafter if bench else "model", bool(bench and bench.drafter_arms))
    verify = fit.measured.dropna(subset=["verify cost"])
    verify = verify[verify["k"] > 0].drop_duplicates("k")  # a cost of the width: one per k, whichever arm
    costs = ", ".join(f"V({int(k) + 1}) = {v:.2f}" for k, v in zip(verify["k"], verify["verify cost"]))
    return (
        f"Break-even fit (the --drafter's modes, decode passes only): a = {fit.a:.3f}, c = {fit.c:.3f}, target step "
        f"{fit.target_step_s * 1e3:.1f} ms; predicted optimum k = {fit.k_opt}"
        + (f" (a model's {pred:.2f}x, a ratio of mean step rates)" if pred else "")
        + f", measured best k = {fit.k_best_measured}"
        + (f" ({fit.best_speedup:.2f}x target, the median per-prompt speedup)" if fit.best_speedup else "")
        + (f"; verify cost in target steps, measured per arm: {costs}" if costs else "")
        + (
            f". With both prefills counted inside the pass times, as before migration 0016, c would read {old:.3f}"
            f" ({(old / fit.c - 1):+.0%})."
            if old
            else "."
        )
    )


def _num(v, fmt: str) -> str:
    return "" if v is None or v != v else format(v, fmt)


def _pct(v) -> str:
    return _num(v, ".0%")


def policies_md(store: Store, run_id: int) -> str:
    """For runs with policies: each mode against the best fixed arm in hindsight, as the Policies page shows it."""
    frame = store.policy_frame(run_id)
    paired = speedups(store.prompt_rewards(run_id))
    best = best_fixed(frame, paired)
    if best is None or not frame["mode"].map(lambda m: m.startswith("bandit")).any():
        return ""
    lines = [
        f"Against the best fixed arm in hindsight ({best}, the highest speedup): each mode's speedup (x target, "
        "the median per-prompt ratio) and its share of the best fixed arm's mean tokens/s (a ratio of means, 95% "
        "interval on the log scale), with Welch's test of per-request tokens/s:",
        "",
        "| mode | n | x target | share of best fixed (95% CI) | mean k | explored | p-value | verdict | arms chosen |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in policy_table(frame, best, paired=paired).to_dict("records"):
        low, high = r["share CI low"], r["share CI high"]
        ci = "" if low is None or low != low else f" ({low:.2f}-{high:.2f})"
        lines.append(
            f"| {r['mode']} | {r['n']} | {_num(r['x reference'], '.2f')}x | {r['share of best fixed']:.3f}{ci} | "
            f"{r['mean k']:.2f} | "
            f"{_pct(r['explored'])} | {_num(r['p-value'], '.3f')} | {r['verdict']} | {r['arms chosen']} |"
        )
    return "\n".join(lines)


def engines_command(stored: dict) -> str:
    """`engines side-by-side` with the flags that differ from its defaults."""
    from dataclasses import asdict

    from engine.engines.config import EnginesConfig

    defaults = asdict(EnginesConfig())
    flags = [
        f"--{k.replace('_', '-')} {shlex.quote(str(v))}"
        for k, v in stored.items()
        if k in defaults and v != defaults[k]
    ]
    return " ".join(["python -m engine engines side-by-side", *flags])


def pass_md(store: Store, run_id: int) -> str:
    """The engine's break-even from its own counts (engine.analysis.pass_cost): what a pass yields and costs."""
    from engine.analysis.pass_cost import PASS_COST
    from engine.bench.report import pass_table

    table = pass_table(store, run_id)
    if table.empty or "tokens_per_pass" not in table:
        return ""
    lines = [
        "| mode | n | k | tokens per pass | pass cost (target tokens) | model's speedup | acceptance | a needed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table.dropna(subset=["tokens_per_pass"]).itertuples():
        need = "none can" if r.a_needed is None or r.a_needed != r.a_needed else f"{r.a_needed:.2f}"
        lines.append(
            f"| {r.mode} | {r.n} | {r.k} | {r.tokens_per_pass:.2f} | {r.pass_cost:.2f} | {r.model_speedup:.2f}x | "
            f"{_pct(r.acceptance)} | {need} |"
        )
    return "\n".join(
        lines
        + [
            "",
            f"The engine's break-even: {PASS_COST}; a needed: the per-token acceptance at which "
            "k drafts would yield the pass's cost (E(a, k) = 1 + a + ... + a^k).",
        ]
    )


def oracle_md(store: Store, run_id: int) -> str:
    """The per-prompt oracle and every mode's share of it (engine.analysis.oracle), for runs of several fixed modes."""
    from engine.analysis.oracle import ORACLE_NOTE
    from engine.bench.report import oracle, oracle_markdown

    table = oracle_markdown(oracle(store, run_id))
    return f"{table}\n\n{ORACLE_NOTE[0].upper()}{ORACLE_NOTE[1:]}." if table else ""


def sources_md(store: Store, run_id: int) -> str:
    """A hybrid's passes by the source that drafted them."""
    from engine.bench.report import sources

    table = sources(store, run_id)
    if table.empty:
        return ""
    lines = ["| mode | source | passes | share of passes | drafted | accepted | acceptance | accepted per pass |"]
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for _, r in table.iterrows():
        lines.append(
            f"| {r['mode']} | {r['source']} | {r['passes']} | {r['share of passes']:.2f} | {r['drafted']} | "
            f"{r['accepted']} | {_pct(r['acceptance'])} | {r['accepted per pass']:.2f} |"
        )
    return "\n".join(lines)


def run_md(store: Store, info: RunInfo) -> str:
    link = f"{DASHBOARD}/run?run={info.id}"
    parts = [f"### {info.name}", "", markdown(info, summaries(store, info.id), link), ""]
    if info.bench is not None:
        parts.append(f"Command: `{bench_command(info.bench)} --db benchmarks/results.db`.")
    elif "serve_engines" in info.config:
        parts.append(
            f"Command: `{engines_command(info.config['serve_engines'])} --db benchmarks/results.db`; the "
            "servers ran as: " + "; ".join(f"`{s['command'].split('/bin/')[-1]}`" for s in info.config["servers"]) + "."
        )
        parts += [
            "",
            "Per draft position, from each server's own counters (accepted at position i / drafts): "
            + "; ".join(
                f"{sv.get('variant') or lv.get('spec_type')}: "
                + (" ".join(f"{r:.3f}" for r in lv["per_position"][:8]) or "no drafts")
                + f" ({lv['drafts']:.0f} drafts)"
                for lv, sv in zip(info.config.get("server_counters", []), info.config["servers"])
                if (lv.get("variant") or lv.get("spec_type")) != "none"
            )
            + ".",
        ]
        passes = pass_md(store, info.id)
        if passes:
            parts += ["", passes]
    elif "load" in info.config:
        parts.append(level_md(store, info))
    elif "phoenix_serve" in info.config:
        parts.append(live_md(store, info))
    for line in (
        leaderboard_md(spec_bench(store, info.id)),
        oracle_md(store, info.id),
        sources_md(store, info.id),
        per_position_md(store, info.id),
        fit_md(store, info.id),
        policies_md(store, info.id),
        divergence_md(store, info.id),
    ):
        if line:
            parts += ["", line]
    return "\n".join(parts)


def render(store: Store) -> str:
    runs = [r for r in reversed(store.list_runs()) if r.status == "done" and not r.archived]
    head = [
        "# Measured results",
        "",
        "Generated by `python -m benchmarks.report` from the runs in `benchmarks/results.db`; do not edit by hand.",
        f"Every table is a run: open them all with `{RESULTS_DASHBOARD_CMD}` (read-only, beside your own",
        "dashboard on 8501), then follow a table's run link. Speedups (x target) are the median of per-prompt",
        "ratios against target-only in the same run, with the interquartile range, n requests per mode (one",
        "definition everywhere: engine/analysis/speedup.py). tokens/s is the mean of per-request tokens/s.",
        "Machines are noisy; ratios measured side by side in one run are the figures to trust.",
        "",
    ]
    body = [run_md(store, info) for info in runs] or ["_No runs in the results database yet._"]
    machine = machine_md()
    tail = ["", "## Not runs: the machine and the dashboard", "", machine] if machine else []
    return "\n".join(head + ["## Runs", ""] + ["\n\n".join(body)] + tail) + "\n"


def open_results(db: str) -> Store:
    url = resolve_url(db)
    ensure_schema(url)
    return Store(url, bench_parser=stored)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", default=str(RESULTS_DB))
    p.add_argument("--out", default=str(DOC))
    p.add_argument("--print", action="store_true", help="print instead of writing the file")
    args = p.parse_args(argv)
    text = render(open_results(args.db))
    if args.print:
        print(text)
        return
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
