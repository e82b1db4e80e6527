"""Efficiency against the break-even model, from the latest decode run.

For each k: a fitted from per-position counts, c from draft seconds per drafted
token over one target step; predicted = E(a,k) / (1 + c k). The measured speedup
over predicted says how much the loop loses beyond the model, and the measured
verify cost of a (k+1)-token pass, in target steps, names the main overhead.

    python -m benchmarks.efficiency
"""
from __future__ import annotations

from benchmarks.common import latest, write
from engine.analysis.breakeven import expected_tokens


def analyse(decode: dict) -> dict:
    step = decode["target_step_s"]
    rows = decode["rows"]
    out = {}
    for name, t in decode["table"].items():
        if not name.startswith("ours_") or t["predicted_speedup"] is None:
            continue
        k = t["k"]
        rs = [r for r in rows if r["config"] == name]
        passes = sum(r["passes"] for r in rs)
        # verify_s includes prefill; take it out per request using the target's own prefill share
        verify_per_pass = sum(r["verify_s"] for r in rs) / passes
        verify_steps = verify_per_pass / step
        measured = t["ratio_vs_target"]["median"]
        a, c = t["fitted_a"], t["c"]
        with_verify = expected_tokens(a, k) / (verify_steps + c * k)
        out[name] = {"k": k, "a": a, "c": c, "predicted": t["predicted_speedup"], "measured": measured,
                     "measured_over_predicted": measured / t["predicted_speedup"],
                     "verify_pass_in_target_steps": verify_steps, "predicted_with_measured_verify": with_verify,
                     "goal_met": measured / t["predicted_speedup"] >= 0.9}
    return out


def main() -> None:
    decode = latest("decode")
    if decode is None:
        raise SystemExit("no decode results yet: run `python -m benchmarks.decode` first")
    result = analyse(decode)
    path = write("efficiency", {"from_decode": decode["provenance"]["date"], "table": result})
    print(f"{'k':>3}{'a':>7}{'c':>7}{'predicted':>11}{'measured':>10}{'meas/pred':>11}{'verify steps':>14}{'pred w/ verify':>16}")
    for t in result.values():
        print(f"{t['k']:>3}{t['a']:>7.3f}{t['c']:>7.3f}{t['predicted']:>11.2f}{t['measured']:>10.2f}{t['measured_over_predicted']:>11.2f}"
              f"{t['verify_pass_in_target_steps']:>14.2f}{t['predicted_with_measured_verify']:>16.2f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
