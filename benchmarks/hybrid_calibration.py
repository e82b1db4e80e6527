"""Choose the hybrid's ``min_score`` on training prompts (never the held-out ones the runs report).

For each prompt (HumanEval's train split and Spec-Bench's train half, two per column), decodes ngram_8, suffix_16 and
hybrid_16 at each min_score, interleaved per prompt in one process, and prints each score's median per-prompt
tokens/s ratio against suffix_16 and ngram_8 with its IQR. Every output is checked against target-only.

    python -m benchmarks.hybrid_calibration [--scores 0.5,1,1.5,2,3] [--humaneval 8] [--per-column 2]
"""

from __future__ import annotations

import argparse
import json
import statistics

import engine  # noqa: F401  (threads and offline settings before torch loads)


def main(argv=None) -> dict:
    from engine.decode.config import HybridConfig, SuffixConfig
    from engine.decode.decoder import Decoder
    from engine.decode.loading import load_pair
    from engine.prompts.sets import humaneval, round_robin, spec_bench, split

    ap = argparse.ArgumentParser()
    ap.add_argument("--scores", default="0.5,1,1.5,2,3")
    ap.add_argument("--humaneval", type=int, default=8)
    ap.add_argument("--per-column", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    args = ap.parse_args(argv)
    scores = [float(s) for s in args.scores.split(",")]
    dec = Decoder(load_pair("smollm2", "smollm2-eagle3", "cpu", "float32"))
    dec.start_run(SuffixConfig())
    firsts = [p for p in round_robin(spec_bench("train"), args.per_column) if p.parent is None]
    prompts = split(humaneval())[0][: args.humaneval] + firsts
    ratios: dict[str, dict[str, list[float]]] = {str(s): {"suffix_16": [], "ngram_8": []} for s in scores}
    for i, p in enumerate(prompts):
        ids = dec.encode(p.text, "chat")
        ref = dec.run(ids, 0, args.max_new_tokens, timed=False).output_ids
        tps = {}
        for name, drafter, k in [("ngram_8", "ngram", 8), ("suffix_16", "suffix", 16)]:
            stats = dec.run(ids, k, args.max_new_tokens, drafter)
            assert stats.output_ids == ref, f"{name} diverged on {p.id}"
            tps[name] = stats.tokens_per_s
        for s in scores if i % 2 == 0 else scores[::-1]:
            dec._hybrid_cfg = HybridConfig(min_score=s)
            stats = dec.run(ids, 16, args.max_new_tokens, "hybrid")
            assert stats.output_ids == ref, f"hybrid {s} diverged on {p.id}"
            for base in ("suffix_16", "ngram_8"):
                ratios[str(s)][base].append(stats.tokens_per_s / tps[base])
        print(f"{i + 1}/{len(prompts)} {p.id}", flush=True)
    out = {}
    for s, by in ratios.items():
        out[s] = {}
        for base, values in by.items():
            q = statistics.quantiles(values, n=4, method="inclusive")
            out[s][base] = {"median": round(statistics.median(values), 3), "p25": round(q[0], 3), "p75": round(q[2], 3)}
    print(json.dumps({"prompts": len(prompts), "x": out}, indent=1))
    return out


if __name__ == "__main__":
    main()
