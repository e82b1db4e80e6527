"""Answer quality with speculation on against off, on the same documents: how many answers are identical, and the
score's difference with its paired interval (a document's score with the drafter minus its score without). Greedy
speculative decoding in fp32 must give identical answers and a difference of exactly 0; in bf16 the answers may part
where two logits tie within bf16's rounding, and the interval says whether the score moved."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class QualityDiff:
    metric: str
    documents: int  # scored by both
    identical: int  # documents whose answers are the same text
    base: float  # the mean score without speculation
    other: float
    diff: float  # other - base
    low: float  # the paired difference's 95% interval (t over documents)
    high: float

    @property
    def text(self) -> str:
        moved = f"{self.diff:+.3f}, 95% {self.low:+.3f}..{self.high:+.3f}"
        same = f"{self.identical}/{self.documents} answers identical"
        return f"{self.metric} {self.base:.3f} -> {self.other:.3f} ({moved}); {same}"


def compare(
    base_scores: dict[str, dict[str, float]],
    other_scores: dict[str, dict[str, float]],
    base_answers: dict[str, str],
    other_answers: dict[str, str],
    metric: str,
) -> QualityDiff | None:
    """Per-document scores ({document: {metric: value}}) and answers of two runs over the same documents."""
    from scipy import stats  # lazy: scipy's import is slow, and only this comparison needs it

    docs = sorted(
        d for d in base_scores if d in other_scores and metric in base_scores[d] and metric in other_scores[d]
    )
    if not docs:
        return None
    a = [base_scores[d][metric] for d in docs]
    b = [other_scores[d][metric] for d in docs]
    diffs = [y - x for x, y in zip(a, b)]
    mean = sum(diffs) / len(diffs)
    if len(diffs) > 1 and any(d != diffs[0] for d in diffs):
        half = stats.t.ppf(0.975, len(diffs) - 1) * stats.tstd(diffs) / math.sqrt(len(diffs))
    else:
        half = 0.0  # every document moved alike (in fp32: none moved): no spread to widen the interval
    same = sum(1 for d in docs if d in base_answers and base_answers.get(d) == other_answers.get(d))
    return QualityDiff(metric, len(docs), same, sum(a) / len(a), sum(b) / len(b), mean, mean - half, mean + half)


def diff_of(store, base: int, other: int, metric: str = "pass_at_1") -> QualityDiff | None:
    """Two quality runs in a store (engine.imports.lm_eval's), compared on the documents both scored."""
    runs = [store.get_run(base), store.get_run(other)]
    if any(r is None or "quality" not in (r.config or {}) for r in runs):
        raise ValueError(f"runs {base} and {other} must both be quality runs (lm-eval)")
    scores = [r.config["quality"]["per_sample"] for r in runs]
    answers = [{q.prompt_id: q.output_sha256 for q in store.requests(i)} for i in (base, other)]
    return compare(scores[0], scores[1], answers[0], answers[1], metric)
