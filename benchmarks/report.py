"""Render the latest benchmark results as Markdown into the README.

    python -m benchmarks.report [--print]
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from benchmarks.common import latest

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def _f(v, fmt):
    return "" if v is None else format(v, fmt)


def decode_md(d: dict) -> str:
    p = d["provenance"]
    s = d["settings"]
    lines = [f"**Decode speed** ({p['date']}, {p['cpu']}, {p['cores']} cores, torch {p['torch']}, transformers "
             f"{p['transformers']}, git {str(p['git_sha'])[:8]}): {s['limit']} held-out HumanEval prompts x {s['repeats']} "
             f"repeats, {s['max_new_tokens']} new tokens, fp32 CPU. Ratios are per prompt against target-only in the same "
             "repeat: median (IQR).", "",
             "| config | tok/s | x target | acceptance | fitted a | c | predicted | draft share | identical |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, t in d["table"].items():
        r = t["ratio_vs_target"]
        lines.append(f"| {name} | {t['tokens_per_s']['median']:.1f} | {r['median']:.2f} ({r['p25']:.2f}-{r['p75']:.2f}) | "
                     f"{_f(t['acceptance'], '.1%')} | {_f(t['fitted_a'], '.3f')} | {_f(t['c'], '.3f')} | "
                     f"{_f(t['predicted_speedup'], '.2f')} | {t['draft_share']:.0%} | {t['identical']} |")
    lines.append("")
    lines.append("Our loop over transformers' assisted generation at equal k: " + ", ".join(
        f"k={k}: {v['median']:.2f}x ({v['p25']:.2f}-{v['p75']:.2f})" for k, v in d["ours_vs_hf"].items()))
    return "\n".join(lines)


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
    lines = ["", f"**Dashboard at scale** ({p['date']}, runs of {b['settings'].get('run_size', 'n/a')} requests; the page shows one run):", "",
             "| requests in DB | insert rate (req/s) | Run page queries (s) | AppTest render of Run page (s) |", "|---:|---:|---:|---:|"]
    for n, r in b["results"].items():
        lines.append(f"| {int(n):,} | {r['insert_rows_per_s']:,.0f} | {r['queries']['all_queries_median_s']:.3f} | {r['run_page_render_s']:.2f} |")
    return "\n".join(lines)


def render() -> str:
    parts = []
    d, e, b = latest("decode"), latest("efficiency"), latest("dashboard")
    if d:
        parts.append(decode_md(d))
    if e:
        parts.append(efficiency_md(e))
    if b:
        parts.append(dashboard_md(b))
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
