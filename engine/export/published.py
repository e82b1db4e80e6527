"""Published figures generated from their runs: README's and the findings' tables and inline figures are blocks
between ``<!-- generated: NAME ARGS -->`` and ``<!-- /generated -->``, each rewritten from ``benchmarks/results.db``
by the one function that computes it. ``python -m engine docs`` writes them; ``--check`` (in CI) exits 1 when any
block disagrees with its runs, so a figure typed by hand cannot drift from the run it cites.

Blocks (ARGS in the marker):
- ``lab-table NAME``: a lab table of TABLES (rows of drafter and mode, columns of runs); each cell the median
  per-prompt speedup over target-only with its 95% interval, the mean acceptance length (vLLM's: 1 + accepted /
  drafting passes) and the outputs identical to target-only.
- ``fit RUN``, ``fit-check RUN,...``: the break-even fit's a and c for a run's drafter (engine.analysis.fit); its
  prediction against the measured speedup, arm by arm, and whether every arm lands within 10%.
- ``goal RUN MODE THRESHOLD``: a speedup goal judged by its interval; ``position0 RUN MODE``: position 0's rate.
- ``rounds VARIANT A_RUNS B_RUNS NAME_A NAME_B``: two settings of one server in alternating rounds, level by level
  (engine.export.published_ab); ``first-sweep FIRST_RUNS SECOND_RUNS``: a server's first sweep against its second,
  level by level, judged against issue 66's 5% by the ratio's interval (the same module).
- ``fleet-plan RUNS``: the fleet plan against the fleets measured in those load runs (engine.export.published_fleet).
- ``levels RUNS``, ``rates RUNS``, ``best-setting NAME=RUNS ...``, ``history VARIANT LABEL=RUNS ...``: load tables
  (engine.export.published_levels).
- ``head-stages FOLDER``, ``head-vocab FOLDER``: a head's build stages and its draft vocabulary's coverage, from
  its card (engine.export.published_head).
- ``step-cost RUNS``: each Phoenix server run's pure decode step by batch, from its own step records
  (engine.export.published_steps).
- ``terms RUNS``: the terms of an engine comparison: per engine its cache scenario, the share of prompt tokens
  its prefix cache served, its cores and weights, and what makes the comparison unequal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from db.store import Store
from engine import runspec
from engine.analysis import prefix
from engine.analysis.fit import fit_run, predictions
from engine.analysis.position_gain import counts as gain_counts
from engine.analysis.position_gain import rate as gain_rate
from engine.analysis.stats import against_goal
from engine.bench.report import summaries
from engine.errors import PhoenixError
from engine.export.published_ab import first_sweep, rounds
from engine.export.published_cells import anchor, cell
from engine.export.published_files import limits, limits_goals
from engine.export.published_fleet import fleet_passes, fleet_plan, fleet_repeat
from engine.export.published_gain import position_gain
from engine.export.published_head import head_stages, head_vocab
from engine.export.published_levels import best_setting, history, levels, prefix_cache, rates
from engine.export.published_modes import lab_runs, leaderboard, modes, pass_cost, position_pairs
from engine.export.published_oracle import columns, oracle, value
from engine.export.published_quality import quality
from engine.export.published_sitting import rates_sitting, sitting
from engine.export.published_steps import step_cost
from engine.export.published_tuner import tuner, tuner_best, tuner_rates
from engine.export.run_ids import run_ids
from engine.paths import ROOT

DOCS = (ROOT / "README.md", ROOT / "docs" / "findings.md", ROOT / "docs" / "serving.md", ROOT / "docs" / "engine.md")
BLOCK = re.compile(r"<!-- generated: (?P<name>[a-z0-9-]+)(?P<args>[^>]*?) -->(?P<body>.*?)<!-- /generated -->", re.S)
WITHIN = 0.10  # the break-even model's error a check allows

# Each lab table: its columns (heading, run) and rows (drafter in words, mode, the runs it has a cell in).
TABLES: dict[str, dict] = {
    "smollm2": {
        "columns": [("HumanEval, bf16 frozen", 78), ("fp32 compiled (exact)", 82), ("Spec-Bench, bf16 frozen", 80)],
        "rows": [
            ("prompt lookup", "ngram_8", (78, 82, 80)),
            ("suffix trees", "suffix_16", (78, 82, 80)),
            ("Phoenix's EAGLE-3 head", "eagle3_3", (78, 82, 80)),
            ("Phoenix's 18M draft model", "model_1", (79, None, 81)),
            ("hybrid: suffix trees or the head, per pass", "hybrid_16", (78, 82, 80)),
            ("Thompson sampling over (drafter, k)", "bandit:thompson", (None, None, 80)),
        ],
    },
    "qwen": {
        "columns": [("HumanEval, bf16, 10 prompts", 189), ("fp32 (exact), 4 prompts", 190), ("Spec-Bench, bf16", 191)],
        "rows": [
            ("the 0.5B draft model", "model_5", (189, None, None)),
            ("the 0.5B draft model", "model_3", (189, 190, 191)),
            ("suffix trees", "suffix_16", (189, 190, 191)),
            ("prompt lookup", "ngram_8", (189, 190, 191)),
            ("epsilon-greedy over (drafter, k)", "bandit", (189, 190, None)),
            ("hybrid: suffix trees or Phoenix's head, per pass", "hybrid_16", (261, 262, 280)),
            ("Phoenix's EAGLE-3 head (8,192-token vocabulary)", "eagle3_3", (261, 262, 280)),
        ],
    },
}


class Figures:
    """The runs' figures, each read once per call (the store is the only source)."""

    def __init__(self, store: Store):
        self.store = store
        self._summaries: dict[int, dict] = {}
        self.results = "docs/results.md"  # results.md as the file being written links to it

    def run(self, run_id: int):
        info = self.store.get_run(run_id)
        if info is None:
            raise PhoenixError(f"a generated block cites run #{run_id}, which {self.store.url} does not hold")
        return info

    def mode(self, run_id: int, mode: str):
        if run_id not in self._summaries:
            self._summaries[run_id] = {m.mode: m for m in summaries(self.store, run_id)}
        found = self._summaries[run_id].get(mode)
        if found is None:
            raise PhoenixError(f"a generated block cites mode {mode} of run #{run_id}, which has no such mode")
        return found

    def fit(self, run_id: int):
        info = self.run(run_id)
        b = info.bench
        s = self.store
        pos, totals, rewards = s.positions(run_id), s.arm_totals(run_id), s.prompt_rewards(run_id)
        return fit_run(pos, totals, rewards, b.drafter if b else "model", drafter_arms=bool(b and b.drafter_arms))


def lab_table(fig: Figures, name: str) -> str:
    spec = TABLES[name]
    heads = [h for h, _ in spec["columns"]]
    lines = [
        "| drafter | mode | " + " | ".join(heads) + " | runs |",
        "|---|---|" + "---:|" * len(heads) + "---|",
    ]
    for label, mode, runs in spec["rows"]:
        cells = [cell(fig, r, mode) if r is not None else "" for r in runs]
        cited = " ".join(
            f"[#{r}](docs/results.md#{anchor(fig.run(r).name)})" for r in dict.fromkeys(x for x in runs if x)
        )
        lines.append(f"| {label} | `{mode}` | " + " | ".join(cells) + f" | {cited} |")
    return "\n" + "\n".join(lines) + "\n"


def fit_text(fig: Figures, run_id: str) -> str:
    fit = fig.fit(int(run_id))
    if fit.a is None or fit.c is None:
        raise PhoenixError(f"run #{run_id} has no break-even fit")
    return f"a = {fit.a:.3f} per position at c = {fit.c:.3f} of a target step"


def fit_check(fig: Figures, runs: str) -> str:
    parts, worst = [], 0.0
    for run_id in (int(r) for r in runs.split(",")):
        for p in predictions(fig.fit(run_id)):
            worst = max(worst, p["error"])
            parts.append(f"`{p['arm']}` (#{run_id}) {p['predicted']:.2f}x predicted, {p['measured']:.2f}x measured "
                         f"({p['error']:.0%})")  # fmt: skip
    verdict = (
        f"within {WITHIN:.0%} for every arm" if worst <= WITHIN else f"**not within {WITHIN:.0%}** (worst {worst:.0%})"
    )
    return "; ".join(parts) + f": {verdict}"


def goal(fig: Figures, args: str) -> str:
    run_id, mode, threshold = args.split()
    sp = fig.mode(int(run_id), mode).speedup
    t = float(threshold)
    said = f"{sp.median:.2f}x, 95% CI {sp.low:.2f}-{sp.high:.2f}, n = {sp.n}"
    verdict = against_goal(sp.median, sp.low, t)
    return f"**{verdict}** ({said}{f': the interval holds {t:g}x' if verdict.startswith('met by') else ''})"


def position0(fig: Figures, args: str) -> str:
    """ARGS: ``RUN MODE [GOAL]``; with a goal, the rate's interval over prompts and whether it clears the goal."""
    run_id, mode, *goal = args.split()
    pos = fig.store.positions(int(run_id))
    first = pos[(pos["mode"] == mode) & (pos["position"] == 0)]
    proposed, accepted = int(first["proposed"].sum()), int(first["accepted"].sum())
    if not proposed:
        raise PhoenixError(f"run #{run_id} {mode} drafted nothing at position 0")
    said = f"{accepted / proposed:.2f} ({accepted} of {proposed} drafts accepted their first token)"
    if not goal:
        return said
    r = gain_rate(gain_counts(fig.store.requests(int(run_id)), mode, 0))
    if r is None:
        raise PhoenixError(f"run #{run_id} {mode}: a goal needs two prompts or more for its interval")
    t = float(goal[0])
    return f"{said}, 95% interval {r[1]:.2f}-{r[2]:.2f} over prompts; goal {t:g}: **{against_goal(r[0], r[1], t)}**"


def terms(fig: Figures, runs: str) -> str:
    """Per engine, what its figures stood on; and whether the comparison was on equal terms."""
    by_engine: dict[str, dict] = {}
    for run_id in run_ids(runs):
        info = fig.store.get_run(run_id)
        if info is None:
            continue
        cfg = info.config or {}
        if isinstance(cfg.get("phoenix_serve"), dict):  # a Phoenix server's own run: its rows say what it cached
            e = by_engine.setdefault("phoenix", {"runs": [], "cores": set(), "weights": set(), "cache": set()})
            e.setdefault("rows", []).extend(fig.store.prefix_rows(run_id))
            e["runs"].append(run_id)
            e["weights"].add(str(cfg["phoenix_serve"].get("dtype") or "not recorded"))
            continue
        if not isinstance(cfg.get("load"), dict) or not isinstance(cfg.get("figures"), dict):
            continue
        for variant in cfg["figures"]:
            spec = runspec.of(info, variant)
            e = by_engine.setdefault(spec.engine, {"runs": [], "cores": set(), "weights": set(), "cache": set()})
            e["runs"].append(run_id)
            e["cores"].add(spec.cores)
            e["weights"].add(spec.target.quantization or "not recorded")
            e["cache"].add(spec.cache)
        engine = str(cfg["load"].get("engine"))
        if engine in by_engine:  # rows that said nothing of a cache are left out by prefix.summary
            by_engine[engine].setdefault("rows", []).extend(fig.store.prefix_rows(run_id))
    lines, shares, cores = [], {}, {}
    for e in by_engine.values():  # a client run that did not record what its server run did: the server's word
        for key in ("weights", "cores"):
            if len(e[key]) > 1:
                e[key].discard("not recorded")
    for engine, e in sorted(by_engine.items()):
        s = prefix.summary(e.get("rows", []))
        shares[engine] = None if s is None else s.token_share
        share = "cached prompt tokens not reported" if s is None else (
            f"{s.token_share:.0%} of prompt tokens served from its prefix cache ({s.hits} of {s.requests} requests hit)"
        )  # fmt: skip
        runs_cited = sorted(set(e["runs"]))
        cores[engine] = ", ".join(sorted(e["cores"])) or "not recorded"
        lines.append(
            f"{engine} (runs #{runs_cited[0]}-#{runs_cited[-1]}): {share}; cache scenario: "
            f"{', '.join(sorted(e['cache'])) or 'the server run'}; cores: {cores[engine]}; weights: "
            f"{', '.join(sorted(e['weights'])) or 'not recorded'}"
        )
    unequal = []
    if any(v for v in shares.values()) and len(shares) > 1:
        unequal.append("one engine was served from its prefix cache and its peers were not (or did not say)")
    counted = {frozenset(runspec.core_count(c) or c for c in e["cores"]) for e in by_engine.values() if e["cores"]}
    if len(counted) > 1:  # "2 threads" and a binding to "0-1" are the same two cores
        unequal.append("the engines computed on different cores")
    verdict = ("**Not on equal terms**: " + "; ".join(unequal) + ".") if unequal else "On equal terms."
    if len(by_engine) == 1:
        only = next(iter(shares.values()))
        verdict = "One engine: its settings shared one server" + (
            f", whose prefix cache served {only:.0%} of their prompt tokens (later settings gained from earlier ones)."
            if only
            else "."
        )
    return "\n\n*Terms of this comparison (generated from the runs)*: " + "; ".join(lines) + ". " + verdict + "\n\n"


def crosscheck(fig: Figures, run: str) -> str:
    """A client cross-check as its run kept it: each figure by both clients, their ratio and whether they agree."""
    kept = (fig.run(int(run)).config or {}).get("crosscheck")
    if not isinstance(kept, dict):
        raise PhoenixError(f"run #{run} holds no client cross-check")
    parts = []
    for name, words in (("output_throughput", "output tok/s"), ("median_ttft_ms", "median TTFT ms")):
        f = kept[name]
        against = []
        for client, title in (("vllm", "vLLM's"), ("guidellm", "GuideLLM's")):
            if f.get(client) is None:
                continue
            ratio, agree = f.get(f"{client}_ratio", f.get("ratio")), f.get(f"{client}_agree", f.get("agree"))
            said = "agree" if agree else f"disagree (beyond {f['tolerance']:.0%})"
            against.append(f"{f[client]:.1f} by {title} ({ratio:.2f}x: {said})")
        parts.append(f"{words} {f['phoenix']:.1f} by Phoenix's client against " + " and ".join(against))
    return "; ".join(parts)


BLOCKS: dict[str, Callable[[Figures, str], str]] = {
    "fleet-plan": fleet_plan,
    "fleet-repeat": fleet_repeat,
    "fleet-passes": fleet_passes,
    "quality": quality,
    "position-gain": position_gain,
    "modes": modes,
    "leaderboard": leaderboard,
    "rounds": rounds,
    "first-sweep": first_sweep,
    "tuner": tuner,
    "tuner-best": tuner_best,
    "tuner-rates": tuner_rates,
    "head-stages": head_stages,
    "head-vocab": head_vocab,
    "crosscheck": crosscheck,
    "sitting": sitting,
    "rates-sitting": rates_sitting,
    "lab-table": lab_table,
    "fit": fit_text,
    "fit-check": fit_check,
    "goal": goal,
    "position0": position0,
    "terms": terms,
    "levels": levels,
    "best-setting": best_setting,
    "history": history,
    "lab-runs": lab_runs,
    "rates": rates,
    "pass-cost": pass_cost,
    "position-pairs": position_pairs,
    "prefix-cache": prefix_cache,
    "oracle": oracle,
    "columns": columns,
    "value": value,
    "limits": limits,
    "limits-goals": limits_goals,
    "step-cost": step_cost,
}


def render(text: str, fig: Figures) -> str:
    def one(m: re.Match) -> str:
        name, args = m["name"], m["args"].strip()
        if name not in BLOCKS:
            raise PhoenixError(f"unknown generated block {name!r}: use {', '.join(BLOCKS)}")
        return f"<!-- generated: {name}{' ' + args if args else ''} -->{BLOCKS[name](fig, args)}<!-- /generated -->"

    return BLOCK.sub(one, text)


def generate(store: Store, paths=DOCS, check: bool = False, say=print) -> int:
    """Rewrite every generated block of ``paths`` from ``store``; with ``check``, write nothing and return 1 where a
    block differs from what its runs give (naming the file and block)."""
    fig = Figures(store)
    stale = []
    for path in map(Path, paths):
        text = path.read_text(encoding="utf-8")
        fig.results = "results.md" if path.parent.name == "docs" else "docs/results.md"
        fresh = render(text, fig)
        if fresh == text:
            continue
        if check:
            old = {m.start(): m[0] for m in BLOCK.finditer(text)}
            new = [m[0] for m in BLOCK.finditer(fresh)]
            for (_, before), after in zip(sorted(old.items()), new):
                if before != after:
                    head = before.split("-->", 1)[0].removeprefix("<!-- generated: ")
                    stale.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {head.strip()}")
        else:
            path.write_text(fresh, encoding="utf-8")
            say(f"wrote {path}")
    for line in stale:
        say(f"out of date: {line}")
    if check and stale:
        say("run `python -m engine docs` to regenerate them from benchmarks/results.db")
    return 1 if stale else 0
