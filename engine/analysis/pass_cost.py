"""What one speculative pass costs a serving engine and what it yields, from the engine's own per-request counts
(llama.cpp's ``timings``: ``draft_n``, ``draft_n_accepted``): the break-even model on an engine whose draft and
verify times are not reported apart.

For a mode that drafted: tokens per pass L = output tokens / passes (the bonus token included, vLLM's mean
acceptance length), and the cost of a pass P in target-only tokens = (seconds per pass) / (the reference's seconds
per token) on the same prompts. Speculation pays when L > P; the ratio L / P is the model's speedup (a ratio of
mean rates, not the paired median). ``a needed`` is the per-token acceptance at which a chain of k drafts would
yield P tokens a pass, E(a, k) = 1 + a + ... + a^k: what the drafter would have to reach at this cost.
"""

from __future__ import annotations

import pandas as pd

from engine.analysis.breakeven import expected_tokens

PASS_COST = (
    "pass cost: seconds per verify pass (drafting included) over the target-only seconds per token on the same "
    "prompts; tokens per pass: output tokens over passes, the bonus token included; the model's speedup L / P"
)


def a_needed(tokens: float, k: int) -> float | None:
    """The acceptance a at which E(a, k) reaches ``tokens`` (None when even a = 1 cannot: tokens > k + 1)."""
    if k < 1 or tokens > k + 1:
        return None
    if tokens <= 1:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, k) < tokens else (lo, mid)
    return (lo + hi) / 2


def pass_costs(requests: pd.DataFrame, reference: str, ks: dict[str, int]) -> pd.DataFrame:
    """Per drafting mode: n (requests that drafted), tokens per pass, pass cost, the model's speedup and the
    acceptance it would need. ``requests``: mode, prompt_id, output_tokens, latency_s, passes, proposed, accepted,
    error (answered requests only count); ``ks``: each mode's longest draft."""
    ok = requests[requests["error"].isna() & (requests["output_tokens"] > 0)]
    ref = ok[ok["mode"] == reference]
    rows = []
    for mode, g in ok[ok["mode"] != reference].groupby("mode", sort=False):
        drafted = g[g["passes"] > 0]
        base = ref[ref["prompt_id"].isin(drafted["prompt_id"])]
        if drafted.empty or base.empty:
            rows.append({"mode": mode, "n": 0})
            continue
        per_token = base["latency_s"].sum() / base["output_tokens"].sum()
        tokens = drafted["output_tokens"].sum() / drafted["passes"].sum()
        cost = drafted["latency_s"].sum() / drafted["passes"].sum() / per_token
        k = int(ks.get(str(mode), 0))
        rows.append(
            {
                "mode": mode,
                "n": len(drafted),
                "k": k,
                "tokens_per_pass": tokens,
                "pass_cost": cost,
                "model_speedup": tokens / cost,
                "acceptance": drafted["accepted"].sum() / drafted["proposed"].sum()
                if drafted["proposed"].sum()
                else None,
                "a_needed": a_needed(cost, k),
            }
        )
    return pd.DataFrame(rows)
