"""The part of docs/results.md that is not a run: the dashboard at scale, recording overhead, the hardware floor
and the GPU check, from the files in benchmarks/results/ (and the GPU check's own database)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import RESULTS as RESULTS_DIR
from benchmarks.common import latest
from benchmarks.limits import markdown as limits_markdown
from db.store import Store
from engine.bench.config import stored
from engine.bench.report import markdown, summaries

ROOT = Path(__file__).resolve().parent.parent


def divergence_md(store: Store, run_id: int) -> str:
    identical, checked, diverged = store.identity(run_id)
    text = f"Outputs checked against target-only on the same prompt and dtype: {identical} of {checked} identical"
    if not diverged.empty:
        firsts = diverged["diverged_at"].dropna().astype(int)
        text += f"; {len(diverged)} diverge, on {diverged['prompt_id'].nunique()} prompts"
        text += (
            f", first at token {firsts.min()}-{firsts.max()} (median {int(firsts.median())})"
            if len(firsts)
            else " (a server returns text, not tokens: the Requests page shows both texts)"
        )
    return text + "."


def machine_md() -> str:
    """What is not a run: the dashboard at scale, recording overhead, GPU shapes (files in benchmarks/results/)."""
    out = []
    d = latest("dashboard")
    if d:
        out.append(
            f"- Dashboard at scale ({d['provenance']['date']}, `python -m benchmarks.dashboard`): "
            + ", ".join(
                f"{int(n):,} requests: Run page queries {r['queries']['all_queries_median_s']:.3f} s, "
                f"render {r['run_page_render_s']:.2f} s"
                for n, r in d["results"].items()
            )
            + "."
        )
    o = latest("overhead")
    if o:
        out.append(
            f"- Recording overhead ({o['provenance']['date']}, `python -m benchmarks.overhead`): "
            + ", ".join(f"{name} {t['overhead']['median']:+.2%}" for name, t in o["table"].items())
            + " of a bare decode's wall time per request (median)."
        )
    lim = latest("limits")
    if lim and lim["settings"].get("target") != "embedded":
        out.append(
            f"- The hardware floor of a decode step ({lim['provenance']['date']}, `python -m benchmarks.limits"
            f"{' --compile' if lim['settings'].get('compile') else ''}`, target {lim['settings']['target']}, "
            f"{lim['settings']['context']} tokens in the cache; V(n) = verify(n) / step):\n\n"
            + limits_markdown(lim)
            + "\n"
        )
    g = latest("gpu")
    if g and not g["settings"].get("tiny"):
        out.append(gpu_md(g))
    return "\n".join(out)


def gpu_md(g: dict) -> str:
    """The GPU check: random-init Qwen3 shapes eager and compiled, then the embedded pair's decode runs, which the
    check recorded in a database beside its result file."""
    q = g["qwen3_random_init"]
    v = q["verify_in_target_steps"]
    lines = [
        f"- GPU check ({g['provenance']['date']}, {g['gpu']}, torch {g['provenance'].get('torch', '?')}, "
        f"`python -m benchmarks.gpu{' --compile' if g['settings'].get('compile') else ''}`; random-init Qwen3-1.7B "
        f"target and Qwen3-0.6B draft in {g['dtype'].removeprefix('torch.')}, {g['settings']['prompt_len']} tokens "
        f"in the cache, median of {g['settings']['reps']}): eager target step {q['target_pass_s']['1'] * 1e3:.2f} "
        f"ms, draft step {q['draft_step_s'] * 1e3:.2f} ms, c = {q['c']:.2f}; eager verify of 5 tokens "
        f"{v['5']:.2f} steps, of 9 {v['9']:.2f}."
    ]
    for r in g.get("compiled", []):
        lines.append(
            f"  - {r['dtype'].removeprefix('torch.')}, static cache and `torch.compile` ({r['mode']}): step "
            f"{r['eager_pass_s']['1'] * 1e3:.2f} ms eager, {r['compiled_pass_s']['1'] * 1e3:.2f} ms compiled "
            f"({r['speedup_step']:.2f}x); verify of 5 tokens {r['verify_in_steps_compiled']['5']:.2f} steps "
            f"compiled; compile {r['compile']['warmup_s']:.0f} s, {r['compile']['graphs']} graphs, "
            f"{r['compile']['recompiles']} recompiles."
        )
    stamp = g["provenance"]["date"]
    dbs = sorted(RESULTS_DIR.glob("gpu-*.db"))
    if dbs:
        store = Store(f"sqlite:///{dbs[-1]}", bench_parser=stored)
        lines.append(
            f"  - The embedded pair's decode on that GPU (code path, not evidence: the tiny pair), each a run in "
            f"`{dbs[-1].relative_to(ROOT)}` (open it with `PHOENIX_DB={dbs[-1].relative_to(ROOT)}`); {stamp}:"
        )
        for info in reversed(store.list_runs()):
            lines += ["", markdown(info, summaries(store, info.id)), "", "  " + divergence_md(store, info.id)]
    return "\n".join(lines)
