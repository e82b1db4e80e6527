"""Render the latest benchmark results as Markdown into the README.

    python -m benchmarks.report [--print]
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from benchmarks.common import latest
from engine.analysis.breakeven import optimum_k, predicted_speedup

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def _f(v, fmt):
    return "" if v is None or v != v else format(v, fmt)  # None and NaN both print as blank


def decode_md(d: dict, title: str = "Decode speed") -> str:
    p = d["provenance"]
    s = d["settings"]
    pair = f"{s.get('target', 'embedded')} / {s.get('draft', 'embedded')}"
    lines = [f"**{title}** ({p['date']}, {p['cpu']}, {p['cores']} cores, torch {p['torch']}, transformers "
             f"{p['transformers']}, git {str(p['git_sha'])[:8]}): pair {pair}, {s.get('dtype', 'float32')} on "
             f"{s.get('device', 'cpu')}, prompts {s.get('prompt_format', 'raw')}; {s['limit']} prompts of {s.get('prompts', 'humaneval-test')} x "
             f"{s['repeats']} repeats, {s['max_new_tokens']} new tokens; target step {d['target_step_s'] * 1e3:.1f} ms. "
             "Ratios are per prompt against target-only in the same repeat: median (IQR); n is requests per config. "
             f"Command: `python -m benchmarks.decode {command(s)}`.", "",
             "| config | n | tok/s | x target | acceptance | mean accepted length | per position (unconditional) | fitted a | c | predicted | draft ms/pass | draft share | identical |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for name, t in d["table"].items():
        r = t["ratio_vs_target"]
        per_pos = " ".join(f"{u:.2f}" for u in t.get("per_position_unconditional") or [])
        lines.append(f"| {name} | {t['tokens_per_s']['n']} | {t['tokens_per_s']['median']:.1f} | {r['median']:.2f} "
                     f"({r['p25']:.2f}-{r['p75']:.2f}) | {_f(t['acceptance'], '.1%')} | {_f(t.get('mean_accepted_length'), '.2f')} | "
                     f"{per_pos} | {_f(t['fitted_a'], '.3f')} | {_f(t['c'], '.3f')} | {_f(t['predicted_speedup'], '.2f')} | "
                     f"{_f(t.get('draft_ms_per_pass'), '.2f')} | {t['draft_share']:.0%} | {t['identical']} |")
    if d.get("ours_vs_hf"):
        lines += ["", "Our loop over transformers' assisted generation at equal k: " + ", ".join(
            f"k={k}: {v['median']:.2f}x ({v['p25']:.2f}-{v['p75']:.2f})" for k, v in d["ours_vs_hf"].items())]
    if d.get("suffix_vs_ngram"):
        lines += ["", "Suffix against n-gram at equal k, Welch's t-test of per-request tokens/sec: " + ", ".join(
            f"k={k}: {v['suffix']:.1f} vs {v['ngram']:.1f} tok/s, p={v['p_value']:.3g} ({v['verdict']})"
            for k, v in d["suffix_vs_ngram"].items() if v)]
    if "divergences" in d:
        div = d["divergences"]
        lines += ["", f"Outputs that differ from target-only in the same dtype: {len(div)}" + (
            " (" + ", ".join(f"{x['config']} on {x['prompt']} at token {x['diverged_at']}" for x in div[:8])
            + (", ..." if len(div) > 8 else "") + ")." if div else ".")]
    return "\n".join(lines)


def breakeven_md(d: dict) -> str:
    """The break-even model's optimum k, fitted to the run (a from the longest drafts' per-position counts, c the
    median of the draft model's measured c), against the best k measured; model drafter rows only."""
    rows = {t["k"]: t for name, t in d["table"].items() if t["backend"] == "model" and t["k"]}
    fitted = [t for t in rows.values() if t["fitted_a"] is not None and t["c"] is not None]
    if not fitted:
        return ""
    a = max(fitted, key=lambda t: t["k"])["fitted_a"]
    c = sorted(t["c"] for t in fitted)[len(fitted) // 2]
    k_model = optimum_k(a, c, max(rows))
    ratios = {0: 1.0, **{k: t["ratio_vs_target"]["median"] for k, t in rows.items()}}
    k_best = max(ratios, key=ratios.get)
    interior = 0 < k_model < max(rows)
    return (f"\nBreak-even model on this run ({d['settings'].get('dtype')}): a = {a:.3f}, c = {c:.3f}: predicted optimum "
            f"k = {k_model} ({predicted_speedup(a, c, k_model):.2f}x); measured best k = {k_best} ({ratios[k_best]:.2f}x "
            f"median). The predicted optimum is {'interior' if interior else 'not interior (at an end of the range)'}"
            f"{'' if k_model == k_best else '; model and measurement disagree'}.")


def command(s: dict) -> str:
    flags = {"target": s.get("target"), "draft": s.get("draft"), "dtype": s.get("dtype"), "limit": s.get("limit"),
             "repeats": s.get("repeats"), "max-new-tokens": s.get("max_new_tokens"),
             "ks": ",".join(map(str, s.get("ks", []))), "drafters": ",".join(s.get("drafters", [])), "tag": s.get("tag"),
             "prompts": None if s.get("prompts", "humaneval-test") == "humaneval-test" else s.get("prompts")}
    return " ".join(f"--{k} {v}" for k, v in flags.items() if v not in (None, ""))


def efficiency_md(e: dict) -> str:
    lines = ["", "**Efficiency against the break-even model** (same decode run):", "",
             "| k | a | c | predicted | measured | measured/predicted | verify pass (target steps) | predicted with measured verify |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in e["table"].values():
        lines.append(f"| {t['k']} | {t['a']:.3f} | {t['c']:.3f} | {t['predicted']:.2f} | {t['measured']:.2f} | "
                     f"{t['measured_over_predicted']:.2f} | {t['verify_pass_in_target_steps']:.2f} | {t['predicted_with_measured_verify']:.2f} |")
    return "\n".join(lines)


def dashboard_md(b: dict) -> str:
    p = b["provenance"]
    lines = ["", f"**Dashboard at scale** ({p['date']}; queries are the Run page's, median of {b['settings'].get('repeats')}; "
             "the render is one AppTest run of the Run page):", "",
             "| requests in DB | requests in the shown run | insert rate (req/s) | Run page queries (s) | AppTest render of Run page (s) |",
             "|---:|---:|---:|---:|---:|"]
    rows = list(b["results"].items()) + list(b.get("single_run", {}).items())
    for n, r in rows:
        shown = r.get("shown_run_requests", b["settings"].get("run_size"))
        lines.append(f"| {int(n):,} | {int(shown):,} | {r['insert_rows_per_s']:,.0f} | {r['queries']['all_queries_median_s']:.3f} | "
                     f"{r['run_page_render_s']:.2f} |")
    return "\n".join(lines)


def runs_page_md(b: dict) -> str:
    lines = []
    for n, r in b.get("many_runs", {}).items():
        q = r["queries"]
        lines += ["", f"Runs page with {int(n):,} runs (3 requests each; tags and archived runs among them): one sorted, "
                  f"filtered page of 50 with its total and rates in {q['median']:.3f} s median ({q['p25']:.3f}-{q['p75']:.3f} "
                  f"IQR, n={q['n']}); AppTest render of the Runs page {r['runs_page_render_s']:.2f} s "
                  f"({b['provenance']['date']}, `python -m benchmarks.dashboard --sizes '' --single-run '' --many-runs {int(n)}`)."]
    return "\n".join(lines)


def overhead_md(o: dict) -> str:
    p, s = o["provenance"], o["settings"]
    lines = ["", f"**Recording overhead** ({p['date']}, {s['limit']} prompts x {s['repeats']} repeats, fixed_{s['k']}, "
             f"{s['max_new_tokens']} new tokens; per request wall time against the bare decode of the same prompt in the "
             "same repeat, rotating order; the writer's final flush spread over the requests):", "",
             "| config | median wall (s) | overhead median (IQR) | with flush | goal < 2% |", "|---|---:|---:|---:|---|"]
    for name, t in o["table"].items():
        ov, fl = t["overhead"], t["overhead_with_flush"]
        lines.append(f"| {name} | {t['wall_s']['median']:.3f} | {ov['median']:+.2%} ({ov['p25']:+.2%} to {ov['p75']:+.2%}) | "
                     f"{fl['median']:+.2%} | {'met' if t['goal_met'] else 'missed'} |")
    lines.append(f"\nSentry transactions received by the local receiver: {o['sentry_transactions_received']}.")
    return "\n".join(lines)


def regret_md(r: dict) -> str:
    p, s = r["provenance"], r["settings"]
    pair = f"pair {s.get('target', 'embedded')} / {s.get('draft', 'embedded')}, drafter {s.get('drafter', 'model')}, {s.get('dtype', 'float32')}, "
    lines = ["", f"**Policies against the best fixed arm in hindsight** ({p['date']}, {pair}run #{r['run_id']}, {s['limit']} "
             f"held-out prompts, {s['max_new_tokens']} new tokens, every mode on every prompt, interleaved; best fixed "
             f"arm: {r['best_fixed']}; Welch's t-test of tokens/sec against it; tok/s is the mean of per-request tokens/sec, "
             "the policies' reward):", "",
             "| mode | n | tok/s | share of best fixed | mean k | explored | p-value | verdict | final cumulative regret |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for row in r["table"]:
        final = r["final_cumulative_regret"].get(row["mode"])
        lines.append(f"| {row['mode']} | {row['n']} | {row['tokens/s']:.1f} | {row['share of best fixed']:.3f} | "
                     f"{row['mean k']:.2f} | {_f(row['explored'], '.0%')} | {_f(row['p-value'], '.4f')} | {row['verdict']} | "
                     f"{_f(final, '.0f')} |")
    return "\n".join(lines)


def gpu_md(g: dict) -> str:
    q = g["qwen3_random_init"]
    lines = ["", f"**Qwen3 shapes, timed** ({g['provenance']['date']}, {g['gpu']}, {g['dtype']}, random-init Qwen3-1.7B target / "
             f"Qwen3-0.6B draft): target step {q['target_pass_s']['1'] * 1e3:.2f} ms, draft step "
             f"{q['draft_step_s'] * 1e3:.2f} ms, c = {q['c']:.3f}; verify cost of n tokens in target steps: "
             + ", ".join(f"{n}: {v:.2f}" for n, v in q["verify_in_target_steps"].items()) + "; best k at a = "
             + ", ".join(f"{a}: k={v['best_k']} ({v['best_speedup']:.2f}x)" for a, v in q["predictions"].items()) + "."]
    return "\n".join(lines)


def render() -> str:
    parts = []
    real = [(f"{tag}_decode_{dtype}", lambda d, t=f"SmolLM2-135M-Instruct, {dtype}, {what}": decode_md(d, t) + breakeven_md(d))
            for tag, what in (("smollm2_model50", "the Phoenix-trained draft on all 50 held-out prompts"),
                              ("smollm2_hf50", "transformers' assisted generation on all 50 held-out prompts"),
                              ("smollm2_ngram50", "n-gram drafter on all 50 held-out prompts"),
                              ("smollm2", "every drafter on 8 prompts (the first draft)"))
            for dtype in ("float32", "bfloat16")]
    real.append(("smollm2_regret", regret_md))
    real += [(f"{tag}_decode_float32", lambda d, t=title: decode_md(d, t)) for tag, title in (
        ("suffix_test", "Suffix decoding, embedded pair, humaneval-test"),
        ("suffix_edit", "Suffix decoding, embedded pair, humaneval-edit-test (output repeats the prompt)"),
        ("suffix_multiturn", "Suffix decoding, embedded pair, humaneval-edit-multiturn-test"),
        ("smollm2_suffix_test", "Suffix decoding, SmolLM2-135M-Instruct, humaneval-test"),
        ("smollm2_suffix_edit", "Suffix decoding, SmolLM2-135M-Instruct, humaneval-edit-test"))]
    sections = real + [("decode", decode_md), ("efficiency", efficiency_md), ("overhead", overhead_md),
                       ("regret", regret_md), ("dashboard", dashboard_md), ("dashboard_runs", runs_page_md),
                       ("gpu", gpu_md)]
    for name, fmt in sections:
        result = latest(name)
        if result and not (name == "gpu" and result["settings"].get("tiny")):
            parts.append(fmt(result))
    return "\n".join(parts) or "_No benchmark results yet._"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--print", action="store_true", help="print instead of writing the README")
    args = p.parse_args()
    md = render()
    if args.print:
        print(md)
        return
    text = README.read_text()
    block = f"{START}\n{md}\n{END}"
    text = re.sub(re.escape(START) + r".*?" + re.escape(END), lambda _: block, text, flags=re.S) if START in text else text + "\n" + block + "\n"
    README.write_text(text)
    print(f"updated {README}")


if __name__ == "__main__":
    main()
