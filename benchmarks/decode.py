"""Decode speed: target-only, our loop, transformers' assisted generation and n-gram
lookup, interleaved per prompt in one process, on held-out HumanEval prompts.

Every figure is a ratio against target-only measured on the same prompt in the
same repeat; the report gives the median and interquartile range of those ratios.

    python -m benchmarks.decode [--limit 10] [--max-new-tokens 96] [--repeats 2] [--ks 2,4,6,8]
    python -m benchmarks.decode --target smollm2 --draft smollm2-draft --dtype bfloat16 --tag smollm2

Identity is checked against target-only in the same dtype; a divergence records its first position.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import engine  # noqa: F401  (BLAS and offline settings before torch loads)
import torch
from benchmarks.common import spread, write
from engine.analysis.breakeven import fit_a, measured_c, predicted_speedup, rates
from engine.decode.loading import load_pair
from engine.decode.prompts import load as load_prompts
from engine.analysis.stats import welch
from engine.decode.decoder import Decoder, first_divergence
from engine.decode.spec import generate
from engine.decode.suffix import SuffixConfig, SuffixDrafter
from engine.modes import K_MAX


NAMES = {"model": "ours", "hf": "hf", "ngram": "ngram", "suffix": "suffix", "suffix-local": "suffix_local"}


def configs(ks: list[int], drafters: list[str]) -> list[tuple[str, str, int]]:
    out = [("target", "model", 0)]
    for k in ks:
        out += [(f"{NAMES[d]}_{k}", d, k) for d in drafters]
    for d in ("suffix", "suffix-local"):  # the adaptive mode: the match length sets the draft length, up to K_MAX
        if d in drafters:
            out.append((f"{NAMES[d]}_{K_MAX}", d, K_MAX))
    return out


def decode_one(dec: Decoder, local: SuffixDrafter, ids: list[int], k: int, n: int, backend: str):
    """'suffix-local' is the suffix drafter without the run's global tree, side by side with the one that has it."""
    if backend != "suffix-local":
        return dec.run(ids, k, n, backend)
    with torch.inference_mode():
        return generate(dec.pair.target, local, ids, k, n, dec.eos_id)


def run(args) -> dict:
    pair = load_pair(args.target, None if args.draft in ("none", "") else args.draft, args.device, args.dtype)
    dec = Decoder(pair)
    dec.start_run(SuffixConfig())
    local = SuffixDrafter(SuffixConfig(global_tree=False))
    prompts = load_prompts(args.prompts, args.limit)
    encoded = [(p.id, dec.encode(p.text, args.prompt_format)) for p in prompts]
    plan = configs(args.ks, args.drafters)
    for _, backend, k in plan:  # warm-up, excluded
        decode_one(dec, local, encoded[0][1], k, 8, backend)
    rows = []
    for rep in range(args.repeats):
        for pid, ids in encoded:
            order = plan if rep % 2 == 0 else [plan[0]] + plan[1:][::-1]  # alternate order against drift
            ref = None
            for name, backend, k in order:
                s = decode_one(dec, local, ids, k, args.max_new_tokens, backend)
                if name == "target":
                    ref = s.output_ids
                rows.append({"config": name, "backend": backend, "k": k, "prompt": pid, "repeat": rep,
                             "tokens_per_s": s.tokens_per_s, "latency_s": s.latency_s, "output_tokens": s.output_tokens,
                             "proposed": s.proposed, "accepted": s.accepted, "passes": s.passes, "draft_s": s.draft_s,
                             "verify_s": s.verify_s, "per_position_proposed": s.per_position_proposed,
                             "per_position_accepted": s.per_position_accepted, "per_position_reached": s.per_position_reached,
                             "identical": s.output_ids == ref,
                             "diverged_at": first_divergence(s.output_ids, ref)})
    return summarise(rows, plan, args)


def summarise(rows: list[dict], plan, args) -> dict:
    base = {(r["prompt"], r["repeat"]): r["tokens_per_s"] for r in rows if r["config"] == "target"}
    tgt = [r for r in rows if r["config"] == "target"]
    step_s = sum(r["verify_s"] for r in tgt) / sum(r["passes"] for r in tgt)
    table = {}
    for name, backend, k in plan:
        rs = [r for r in rows if r["config"] == name]
        prop = [sum(r["per_position_proposed"][i] for r in rs if i < len(r["per_position_proposed"])) for i in range(k)]
        acc = [sum(r["per_position_accepted"][i] for r in rs if i < len(r["per_position_accepted"])) for i in range(k)]
        reached = [sum(r["per_position_reached"][i] for r in rs if i < len(r.get("per_position_reached", [])))
                   for i in range(k)] if all("per_position_reached" in r for r in rs) else None
        uncond, cond = rates(prop, acc, reached) if k else ([], [])
        a = fit_a(prop, acc, reached) if k else None
        c = measured_c(sum(r["draft_s"] for r in rs), sum(r["proposed"] for r in rs), step_s) if (k and backend == "model") else None
        table[name] = {
            "backend": backend, "k": k,
            "tokens_per_s": spread([r["tokens_per_s"] for r in rs]),
            "ratio_vs_target": spread([r["tokens_per_s"] / base[(r["prompt"], r["repeat"])] for r in rs]),
            "acceptance": (sum(acc) / sum(prop)) if k and sum(prop) else None,
            "per_position_unconditional": uncond, "per_position_conditional": cond, "fitted_a": a, "c": c,
            "predicted_speedup": predicted_speedup(a, c, k) if (a is not None and c is not None) else None,
            "identical": f"{sum(r['identical'] for r in rs)}/{len(rs)}",
            "mean_accepted_length": 1 + sum(r["accepted"] for r in rs) / prop[0] if k and prop and prop[0] else None,
            "draft_ms_per_pass": 1e3 * sum(r["draft_s"] for r in rs) / max(1, sum(r["passes"] for r in rs)),
            "draft_share": sum(r["draft_s"] for r in rs) / max(1e-9, sum(r["latency_s"] for r in rs)),
        }
    ours_vs_hf = {}
    for k in args.ks if {"model", "hf"} <= set(args.drafters) else []:
        pairs = {(r["prompt"], r["repeat"]): r["tokens_per_s"] for r in rows if r["config"] == f"hf_{k}"}
        ours_vs_hf[k] = spread([r["tokens_per_s"] / pairs[(r["prompt"], r["repeat"])] for r in rows if r["config"] == f"ours_{k}"])
    suffix_vs_ngram = {}
    for k in args.ks if {"suffix", "ngram"} <= set(args.drafters) else []:
        w = welch([r["tokens_per_s"] for r in rows if r["config"] == f"ngram_{k}"],
                  [r["tokens_per_s"] for r in rows if r["config"] == f"suffix_{k}"])
        suffix_vs_ngram[k] = None if w is None else {"ngram": w.mean_a, "suffix": w.mean_b, "p_value": w.p_value,
                                                     "verdict": w.verdict}
    divergences = [{"config": r["config"], "prompt": r["prompt"], "diverged_at": r["diverged_at"]}
                   for r in rows if not r["identical"]]
    return {"settings": vars(args) | {"ks": args.ks}, "target_step_s": step_s, "divergences": divergences, "table": table, "ours_vs_hf": ours_vs_hf,
            "suffix_vs_ngram": suffix_vs_ngram, "rows": rows}


def print_table(result: dict) -> None:
    print(f"{'config':<10}{'tok/s':>8}{'x target (IQR)':>22}{'accept':>8}{'a':>7}{'c':>7}{'pred':>7}{'draft%':>8}{'identical':>11}")
    for name, t in result["table"].items():
        r = t["ratio_vs_target"]
        fmt = lambda v, f: "" if v is None else format(v, f)  # noqa: E731
        print(f"{name:<10}{t['tokens_per_s']['median']:>8.1f}{r['median']:>9.2f} ({r['p25']:.2f}-{r['p75']:.2f})"
              f"{fmt(t['acceptance'], '.1%'):>8}{fmt(t['fitted_a'], '.3f'):>7}{fmt(t['c'], '.3f'):>7}"
              f"{fmt(t['predicted_speedup'], '.2f'):>7}{t['draft_share']:>8.0%}{t['identical']:>11}")
    for k, s in result["ours_vs_hf"].items():
        print(f"ours/hf at k={k}: median {s['median']:.2f} (IQR {s['p25']:.2f}-{s['p75']:.2f}, n={s['n']})")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="embedded")
    p.add_argument("--draft", default="embedded")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--prompts", default="humaneval-test")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--ks", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4, 6, 8])
    p.add_argument("--drafters", type=lambda s: [x for x in s.split(",") if x], default=["model", "hf", "ngram"])
    p.add_argument("--prompt-format", default="auto", help="auto | chat | raw (auto: chat when the target has a template)")
    p.add_argument("--tag", default="", help="results are named <tag>_decode_<dtype> (the README's real-pair sections)")
    p.add_argument("--out", default=None, help="results folder (default benchmarks/results)")
    args = p.parse_args(argv)
    result = run(args)
    name = f"{args.tag}_decode_{args.dtype}" if args.tag else "decode"
    path = write(name, result, Path(args.out)) if args.out else write(name, result)
    print_table(result)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
