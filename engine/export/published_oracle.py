"""A lab run's drafters against each other and against the per-prompt oracle (the ``oracle`` and ``columns`` blocks
of engine.export.published): what findings.md typed by hand for the hybrid's runs, read from the run. Every ratio is
the one speedup figure (engine.analysis.speedup) with the named mode as the reference: the median of per-prompt
tokens/s ratios; no cell is marked best without its interval clearing 1."""

from __future__ import annotations

from engine.analysis.oracle import oracle_table
from engine.analysis.speedup import speedups
from engine.analysis.stats import against_goal
from engine.bench.leaderboard import COLUMN_TITLES, OVERALL, in_column
from engine.errors import PhoenixError
from engine.measure import tokens_per_pass


def _options(args: str) -> tuple[int, list[str], dict[str, str]]:
    run_text, listed, *more = args.split()
    named = dict(m.split("=", 1) for m in more if "=" in m)
    return int(run_text), [m for m in listed.split(",") if m], named


def _ratio(spread, interval: bool = False) -> str:
    if spread is None or spread.median is None:
        return ""
    if interval and spread.low is not None:
        return f"{spread.median:.2f}x ({spread.low:.2f}-{spread.high:.2f})"
    return f"{spread.median:.2f}x ({spread.p25:.2f}-{spread.p75:.2f})"


def oracle(fig, args: str) -> str:
    """ARGS: ``RUN MODE,MODE,... vs=MODE``: each mode against target-only and against ``vs`` (median, IQR), its
    tokens per pass, its share of the per-prompt oracle (the fastest fixed mode on each prompt, in hindsight) and
    the prompts on which it was that fastest mode."""
    run_id, modes, named = _options(args)
    vs = named.get("vs")
    frame = fig.store.prompt_rewards(run_id)
    if frame.empty:
        raise PhoenixError(f"run #{run_id} has no answered request")
    base, against = speedups(frame), speedups(frame, vs) if vs else {}
    table = oracle_table(frame).set_index("mode")
    if table.empty:
        raise PhoenixError(f"run #{run_id} has fewer than two fixed modes: no oracle")
    lines = [
        "| mode | x target (IQR) |" + (f" x {vs} (IQR) |" if vs else "") + " tokens per pass | oracle share (IQR) | "
        "oracle picks |",
        "|---|---:|" + ("---:|" if vs else "") + "---:|---:|---:|",
    ]
    for mode in modes:
        if mode not in table.index:
            raise PhoenixError(f"a generated block cites mode {mode} of run #{run_id}, which has no such mode")
        row, m = table.loc[mode], fig.mode(run_id, mode)
        share = f"{row['share of oracle']:.3f} ({row['share p25']:.3f}-{row['share p75']:.3f})"
        x_vs = (" 1.00x |" if mode == vs else f" {_ratio(against.get(mode))} |") if vs else ""
        per_pass = f"{m.tokens_per_pass:.2f}" if m.tokens_per_pass is not None else ""
        lines.append(f"| {mode} | {_ratio(base.get(mode))} |{x_vs} {per_pass} | {share} | {int(row['oracle picks'])} |")
    shown = table.loc["oracle"]
    lines.append(f"| the oracle | {shown['x reference']:.2f}x |" + (" |" if vs else "") + " | 1 | |")
    return "\n\n" + "\n".join(lines) + "\n\n"


def columns(fig, args: str) -> str:
    """ARGS: ``RUN MODE vs=MODE,MODE,...``: per Spec-Bench column group, the mode against target-only and against
    each single drafter (median and its 95% interval over the group's prompts), and the drafters it is faster than
    and slower than where an interval says so."""
    run_id, (mode, *_), named = _options(args)
    others = [m for m in named.get("vs", "").split(",") if m]
    frame = fig.store.prompt_rewards(run_id)
    if frame.empty or not others:
        raise PhoenixError(f"columns: run #{run_id} with vs=MODE,... (the drafters to compare {mode} against)")
    lines = [
        f"| column group | {mode} x target | " + " | ".join(f"x {o} (95% CI)" for o in others) + " | verdict |",
        "|---|---:|" + "---:|" * len(others) + "---|",
    ]
    for column, title in COLUMN_TITLES.items():
        part = in_column(frame, column)
        if part.empty:
            continue
        against = {o: speedups(part, o).get(mode) for o in others}
        faster = [o for o, s in against.items() if s is not None and s.low is not None and s.low > 1]
        slower = [o for o, s in against.items() if s is not None and s.high is not None and s.high < 1]
        verdict = "; ".join(
            part for part in (f"faster than {', '.join(faster)}" if faster else "",
                              f"slower than {', '.join(slower)}" if slower else "") if part
        ) or "tied with every one"  # fmt: skip
        head = f"**{title.lower()}**" if column == OVERALL else title
        cells = " | ".join(_ratio(s, interval=True) for s in against.values())
        lines.append(f"| {head} | {_ratio(speedups(part).get(mode))} | {cells} | {verdict} |")
    return "\n\n" + "\n".join(lines) + "\n\n"


def value(fig, args: str) -> str:
    """ARGS: ``RUN MODE KIND [on=RUN] [goal=G]``, one figure inline (a table cell typed by hand before): KIND
    ``position0`` (accepted first tokens over drafts, three places), ``per-pass`` (tokens per pass, every pass
    counted: engine.measure) or ``x=MODE`` (the median per-prompt ratio to MODE with its IQR); ``on=RUN``: only the
    prompts that run answered in the same mode (a figure compared across runs on the same requests); ``goal=G``:
    judged against G (engine.analysis.stats.against_goal: a ratio by its 95% interval, a rate or a length by its
    point)."""
    run_text, mode, kind, *more = args.split()
    run_id, named = int(run_text), dict(m.split("=", 1) for m in more if "=" in m)
    requests = [r for r in fig.store.requests(run_id) if r.mode == mode and not r.error]
    if "on" in named:
        other = {r.prompt_id for r in fig.store.requests(int(named["on"])) if r.mode == mode and not r.error}
        requests = [r for r in requests if r.prompt_id in other]
    if not requests:
        raise PhoenixError(f"a generated block cites mode {mode} of run #{run_id}, which answered nothing there")
    goal = float(named["goal"]) if "goal" in named else None
    if kind == "position0":
        first = [p for r in requests for p in r.positions or [] if p.position == 0]
        drafts = sum(p.proposed for p in first)
        if not drafts:
            raise PhoenixError(f"run #{run_id} {mode} drafted nothing at position 0")
        point = sum(p.accepted for p in first) / drafts
        return f"{point:.3f}" + (f": {against_goal(point, None, goal)}" if goal is not None else "")
    if kind == "per-pass":
        shown = tokens_per_pass(sum(r.accepted or 0 for r in requests), sum(r.passes or 0 for r in requests))
        if shown is None:
            raise PhoenixError(f"run #{run_id} {mode} made no verify pass")
        return f"{shown:.2f}" + (f": {against_goal(shown, None, goal)}" if goal is not None else "")
    if kind.startswith("x="):
        frame = fig.store.prompt_rewards(run_id)
        sp = speedups(frame[frame["prompt_id"].isin({r.prompt_id for r in requests})], kind[2:]).get(mode)
        if goal is None or sp is None or sp.median is None:
            return _ratio(sp)
        return f"{_ratio(sp, interval=True)}: {against_goal(sp.median, sp.low, goal)}"
    raise PhoenixError(f"value: KIND is position0, per-pass or x=MODE, got {kind!r}")
