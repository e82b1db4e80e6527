"""The break-even model on a serving engine's own counts: tokens per pass, the cost of a pass in target-only
tokens, and the acceptance a drafter would need at that cost."""

from __future__ import annotations

import pandas as pd
import pytest

from engine.analysis.breakeven import expected_tokens
from engine.analysis.pass_cost import a_needed, pass_costs


def test_a_needed_is_where_a_chain_of_k_drafts_yields_the_passes_cost():
    a = a_needed(3.0, 3)
    assert expected_tokens(a, 3) == pytest.approx(3.0, abs=1e-9) and 0.8 < a < 0.82
    assert a_needed(0.9, 3) == 0.0  # a pass cheaper than a token: anything pays
    assert a_needed(5.0, 3) is None  # four tokens a pass at most: no drafter can


def req(mode, prompt_id, output_tokens, latency_s, passes=0, proposed=0, accepted=0, error=None) -> dict:
    """One answered request as the store reads it."""
    return {
        "mode": mode,
        "prompt_id": prompt_id,
        "output_tokens": output_tokens,
        "latency_s": latency_s,
        "passes": passes,
        "proposed": proposed,
        "accepted": accepted,
        "error": error,
    }


def test_pass_cost_and_tokens_per_pass_come_from_the_same_prompts_requests():
    rows = (
        [req("none", p, 100, 1.0) for p in ("a", "b", "c")]  # reference: 100 tokens in 1.0 s (10 ms a token)
        # 100 tokens in 50 passes (2 a pass), 1.5 s: 30 ms a pass, 3 target tokens
        + [req("draft-k3", p, 100, 1.5, passes=50, proposed=150, accepted=50) for p in ("a", "b")]
        + [
            req("draft-k3", "c", 0, 0.1, error="boom"),  # a failure is no evidence
            req("ngram", "a", 100, 1.0),  # never drafted: no pass to cost
        ]
    )
    table = pass_costs(pd.DataFrame(rows), "none", {"draft-k3": 3}).set_index("mode")
    r = table.loc["draft-k3"]
    assert r["n"] == 2 and r["tokens_per_pass"] == pytest.approx(2.0) and r["pass_cost"] == pytest.approx(3.0)
    assert r["model_speedup"] == pytest.approx(2 / 3) and r["acceptance"] == pytest.approx(1 / 3)
    assert r["a_needed"] == pytest.approx(a_needed(3.0, 3))
    assert table.loc["ngram", "n"] == 0
