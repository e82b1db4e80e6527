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


def test_pass_cost_and_tokens_per_pass_come_from_the_same_prompts_requests():
    rows = (
        [
            # reference: 100 tokens in 1.0 s on each prompt (10 ms a token)
            {
                "mode": "none",
                "prompt_id": p,
                "output_tokens": 100,
                "latency_s": 1.0,
                "passes": 0,
                "proposed": 0,
                "accepted": 0,
                "error": None,
            }
            for p in ("a", "b", "c")
        ]
        + [
            # 100 tokens in 50 passes (2 a pass), 1.5 s: 30 ms a pass, 3 target tokens
            {
                "mode": "draft-k3",
                "prompt_id": p,
                "output_tokens": 100,
                "latency_s": 1.5,
                "passes": 50,
                "proposed": 150,
                "accepted": 50,
                "error": None,
            }
            for p in ("a", "b")
        ]
        + [
            {
                "mode": "draft-k3",
                "prompt_id": "c",
                "output_tokens": 0,
                "latency_s": 0.1,
                "passes": 0,
                "proposed": 0,
                "accepted": 0,
                "error": "boom",
            },  # a failure is no evidence
            {
                "mode": "ngram",
                "prompt_id": "a",
                "output_tokens": 100,
                "latency_s": 1.0,
                "passes": 0,
                "proposed": 0,
                "accepted": 0,
                "error": None,
            },  # never drafted: no pass to cost
        ]
    )
    table = pass_costs(pd.DataFrame(rows), "none", {"draft-k3": 3}).set_index("mode")
    r = table.loc["draft-k3"]
    assert r["n"] == 2 and r["tokens_per_pass"] == pytest.approx(2.0) and r["pass_cost"] == pytest.approx(3.0)
    assert r["model_speedup"] == pytest.approx(2 / 3) and r["acceptance"] == pytest.approx(1 / 3)
    assert r["a_needed"] == pytest.approx(a_needed(3.0, 3))
    assert table.loc["ngram", "n"] == 0
