"""One verdict for the Run and Break-even pages (engine.analysis.breakeven.verdict), never contradicting the
measured speedups beside it."""

from __future__ import annotations


def test_the_verdict_never_contradicts_the_measured_speedups_beside_it():
    """The real-pair demo measured every mode losing while two pages said "Speculation pays here (a = 0.57)"."""
    from engine.analysis.breakeven import diagnose, verdict

    losing = [("eagle3_3", 0.64), ("suffix_16", 0.74), ("ngram_8", 0.82)]
    text = verdict(0.57, None, 0.05, 3, losing)
    assert "does not pay" in text and "ngram_8" in text and "0.82x" in text and "pays here" not in text
    assert "Yet ngram_8 measured 1.40x" in verdict(0.3, 0.9, 0.1, 2, [("model_2", 0.9), ("ngram_8", 1.4)])
    assert verdict(0.7, 1.3, 0.05, 3, []) == diagnose(0.7, 1.3, 0.05, 3)  # nothing measured: the model's word
    assert verdict(0.7, 1.3, 0.05, 3, [("model_3", 1.25)]) == "Speculation pays here (a = 0.70)."
