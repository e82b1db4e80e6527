"""One lab run's modes as a table (the ``modes`` block of engine.export.published): what findings.md showed typed by
hand for its first runs, now read from the run. Acceptance is engine.measure's unconditional meaning (accepted /
proposed over every position, and at position 0 alone); tokens per pass is Spec-Bench's (1.00 for target-only); the
per-position column is vLLM's (accepted at each position over the passes that drafted)."""

from __future__ import annotations

import pandas as pd

from engine.bench.leaderboard import markdown
from engine.bench.report import spec_bench
from engine.errors import PhoenixError
from engine.export.published_cells import anchor, cell
from engine.modes import Mode, reference_mode

WORDS = {
    "none": "none",
    "model": "draft model",
    "ngram": "prompt lookup",
    "suffix": "suffix trees",
    "eagle3": "EAGLE-3 head",
    "hybrid": "suffix trees or the head",
}


def _rate(accepted: int, proposed: int) -> str:
    return f"{accepted / proposed:.1%}" if proposed else ""


def _curve(pos, mode: str, shown: int) -> str:
    """Accepted at each position over the passes that drafted at all (vLLM's per-position figure: for a drafter
    whose length varies, a deep position's rate is not conditioned on the pass having drafted that deep)."""
    rows = pos[(pos["mode"] == mode) & (pos["position"] < shown)].groupby("position")[["proposed", "accepted"]].sum()
    drafts = int(rows["proposed"].iloc[0]) if len(rows) else 0
    return " ".join(f"{a / drafts:.2f}" for a in rows["accepted"]) if drafts else ""


def modes(fig, args: str) -> str:
    """ARGS: ``RUN MODE,MODE,... [positions=N]`` (``1 target,model_1,ngram_8``), the rows in that order; with
    ``positions=N`` a column of the first N positions' acceptance each."""
    run_text, listed, *more = args.split()
    run_id = int(run_text)
    shown = int(more[0].removeprefix("positions=")) if more else 0
    info = fig.run(run_id)
    drafter = info.bench.drafter if info.bench else "model"
    pos = fig.store.positions(run_id)
    base = reference_mode(m.mode for m in fig.store.mode_summaries(run_id))
    lines = [
        f"| mode | drafter | tok/s | x {base} (IQR) | acceptance | at position 0 | tokens per pass | identical |"
        + (f" per position (0..{shown - 1}), of drafting passes |" if shown else ""),
        "|---|---|---:|---:|---:|---:|---:|---:|" + ("---|" if shown else ""),
    ]
    for mode in [m.strip() for m in listed.split(",") if m.strip()]:
        m = fig.mode(run_id, mode)
        first = pos[(pos["mode"] == mode) & (pos["position"] == 0)]
        sp = m.speedup
        if sp is None or sp.median is None:
            raise PhoenixError(f"run #{run_id} {mode} has no paired speedup")
        x = "1.00x" if mode == base else f"{sp.median:.2f}x ({sp.p25:.2f}-{sp.p75:.2f})"
        drafted = m.tokens_per_pass is not None and (m.proposed or mode == base)  # a served reference counts none
        per_pass = f"{m.tokens_per_pass:.2f}" if drafted else ("1.00" if mode == base else "")
        drafted_by = Mode.of(mode).drafter(drafter)
        same = f"{m.identical_n}/{m.checked_n}" if m.checked_n else ""
        lines.append(
            f"| {mode} | {WORDS.get(drafted_by, drafted_by)} | {m.tokens_per_s:.1f} | {x} | "
            f"{_rate(m.accepted, m.proposed)} | {_rate(int(first['accepted'].sum()), int(first['proposed'].sum()))} "
            f"| {per_pass} | {same} |" + (f" {_curve(pos, mode, shown)} |" if shown else "")
        )
    return "\n\n" + "\n".join(lines) + "\n\n"


def leaderboard(fig, args: str) -> str:
    """ARGS: ``RUN[:MODE,MODE,...]`` several times, space-separated: each run's Spec-Bench leaderboard rows (every
    mode, or those named, in that order), one table, as `python -m engine report RUN --by column` prints them."""
    parts = []
    for spec in args.split():
        run_text, _, listed = spec.partition(":")
        fig.run(int(run_text))
        table = spec_bench(fig.store, int(run_text))
        if table.empty:
            raise PhoenixError(f"run #{run_text} is not a Spec-Bench run")
        wanted = [m for m in listed.split(",") if m] or list(dict.fromkeys(table["mode"]))
        for mode in wanted:
            if mode not in set(table["mode"]):
                raise PhoenixError(f"a generated block cites mode {mode} of run #{run_text}, which has no such mode")
            parts.append(table[table["mode"] == mode])
    text = markdown(pd.concat(parts, ignore_index=True))
    return "\n\n" + text + "\n\n"


def _words(mode: str, bench: dict) -> str:
    """What drafts a mode, in words; a bandit by its policy and arms as its run kept them."""
    m = Mode.of(mode)
    if m.is_bandit:
        policy = str(m.policy or bench.get("policy") or "a bandit").replace("_", "-")
        return f"{policy} over {'(drafter, k)' if bench.get('drafter_arms') else 'k'}"
    drafter = m.drafter(str(bench.get("drafter") or "model"))
    return WORDS.get(drafter, drafter)


def lab_runs(fig, args: str) -> str:
    """ARGS: ``RUN,RUN,... MODE,MODE,...``: modes as rows and runs as columns (a lab table of one section), each cell
    as the ``lab-table`` block gives it (the median per-prompt speedup with its 95% interval, vLLM's mean acceptance
    length, outputs identical to target-only); a mode a run lacks is an empty cell. No cell is marked best."""
    runs_text, listed = args.split()
    runs = [int(r) for r in runs_text.split(",")]
    heads = []
    for run_id in runs:
        info = fig.run(run_id)
        n = max((m.n for m in fig.store.mode_summaries(run_id)), default=0)
        heads.append(f"[#{run_id}]({fig.results}#{anchor(info.name)}), {n} prompts")
    lines = ["| drafter | mode | " + " | ".join(heads) + " |", "|---|---|" + "---:|" * len(runs)]
    for mode in [m for m in listed.split(",") if m]:
        cells, drafted_by = [], None
        for run_id in runs:
            info = fig.run(run_id)
            if mode not in {m.mode for m in fig.store.mode_summaries(run_id)}:
                cells.append("")
                continue
            drafted_by = _words(mode, (info.config or {}).get("bench") or {})
            cells.append(cell(fig, run_id, mode))
        if drafted_by is None:
            raise PhoenixError(f"a generated block cites mode {mode}, which none of runs {runs_text} has")
        lines.append(f"| {drafted_by} | `{mode}` | " + " | ".join(cells) + " |")
    return "\n\n" + "\n".join(lines) + "\n\n"


def pass_cost(fig, args: str) -> str:
    """ARGS: ``RUN:MODE,MODE,...`` several times, space-separated: each drafting mode's pass as the engine's own
    counts price it (`report RUN --by pass`, engine.analysis.pass_cost): tokens per pass, its cost in target-only
    tokens, the model's speedup L / P beside the paired median measured, and the acceptance a chain of k drafts
    would need to pay."""
    from engine.bench.report import pass_table  # lazy: the report module reads every request of a run

    lines = [
        "| variant (run) | k | tokens per pass | pass cost (target tokens) | model's speedup | measured (IQR) | "
        "a needed |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for spec in args.split():
        run_text, _, listed = spec.partition(":")
        run_id = int(run_text)
        table = pass_table(fig.store, run_id).set_index("mode")
        for mode in [m for m in listed.split(",") if m]:
            if mode not in table.index or not table.loc[mode, "n"]:
                raise PhoenixError(f"a generated block cites mode {mode} of run #{run_id}, which drafted nothing")
            row, sp = table.loc[mode], fig.mode(run_id, mode).speedup
            measured = f"{sp.median:.2f}x ({sp.p25:.2f}-{sp.p75:.2f})" if sp and sp.median is not None else ""
            needed = "" if pd.isna(row["a_needed"]) else f"{row['a_needed']:.2f}"
            lines.append(
                f"| {mode} (#{run_id}) | {int(row['k'])} | {row['tokens_per_pass']:.2f} | {row['pass_cost']:.2f} | "
                f"{row['model_speedup']:.2f}x | {measured} | {needed} |"
            )
    return "\n\n" + "\n".join(lines) + "\n\n"


def _paired_curve(store, run_id: int, mode: str, prompts: set[str]) -> list[float]:
    """vLLM's per-position acceptance (accepted at a position over the passes that drafted at all) over the answered
    requests of these prompts."""
    proposed, accepted, depth = 0, [0, 0, 0], 0
    for r in store.requests(run_id):
        for p in (r.positions or []) if r.mode == mode else []:
            depth = max(depth, p.position + 1)
            if r.prompt_id in prompts and not r.error:
                proposed += p.proposed if p.position == 0 else 0
                accepted[p.position] += p.accepted if p.position < 3 else 0
    return [a / proposed for a in accepted[: min(depth, 3)]] if proposed else []


def position_pairs(fig, args: str) -> str:
    """ARGS: ``RUN:MODE=RUN:MODE`` several times, space-separated: one drafter's per-position acceptance in
    Phoenix's loop and in the engine it was exported to, on the prompts both answered (paired), each in vLLM's
    definition (accepted at a position over the passes that drafted at all), and the second's position 0 over the
    first's."""
    from engine import runspec  # lazy: as the other blocks that read a run's record

    lines = [
        "| draft | weights | prompts (both answered) | Phoenix's loop: position 0, 1, 2 (run) | exported: position 0, "
        "1, 2 (run) | exported / Phoenix at position 0 |",
        "|---|---|---|---|---|---:|",
    ]
    for pair in args.split():
        sides = [(int(r), m) for r, _, m in (side.partition(":") for side in pair.split("="))]
        answered = [{r.prompt_id for r in fig.store.requests(i) if r.mode == m and not r.error} for i, m in sides]
        both = answered[0] & answered[1]
        (a_id, a_mode), (b_id, b_mode) = sides
        a_curve, b_curve = (_paired_curve(fig.store, i, m, both) for i, m in sides)
        if not a_curve or not b_curve:
            raise PhoenixError(f"position-pairs {pair}: a side drafted nothing on the prompts both answered")
        a, b = runspec.of(fig.run(a_id), a_mode), runspec.of(fig.run(b_id), b_mode)
        weights = a.target.quantization if a.target.quantization == b.target.quantization else (
            f"{b.target.quantization} in {b.engine}, {a.target.quantization} in Phoenix"
        )  # fmt: skip
        k = f"k = {a.speculation.k}" + ("" if a.speculation.k == b.speculation.k else f" and {b.speculation.k}")
        drafter = WORDS.get(a.speculation.drafter, a.speculation.drafter)
        shown = [", ".join(f"{x:.3f}" for x in c) for c in (a_curve, b_curve)]
        lines.append(f"| {drafter}, {k} | {weights} | {len(both)} of {a.prompts} | {shown[0]} (#{a_id}) | "
                     f"{shown[1]} (#{b_id}) | {b_curve[0] / a_curve[0]:.2f} |")  # fmt: skip
    return "\n\n" + "\n".join(lines) + "\n\n"
