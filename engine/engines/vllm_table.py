"""vLLM's per-batch-size k table (Dynamic SD's ``num_speculative_tokens_per_batch_size``), learned from a load
sweep of vLLM on the user's own workload, model, drafter and CPU.

vLLM ships no default table ("hardware and category dependent"), and acceptance alone cannot give one: it stays flat
with the batch while the cost of a wider verify grows (vLLM PR 26504's comment: +23% at batch 1, -16% at batch 32).
So each k is scored at each batch size by what it costs there, measured: a step of k drafts at batch b costs
``step_s(k, b) = TPOT(k, b) x tokens_per_step(k, b)`` (vLLM's own TPOT, and its own per-request acceptance), and it
yields ``1 + sum_{i<k} a_i`` tokens a request, with a_i the per-position acceptance pooled over every level (it does
not depend on the batch, and pooling gives it the most n). The best k at b maximises yield / step_s; k = 0 is
speculation off, scored on the none variant's own TPOT. Batch sizes between the levels measured take the nearer
level's k (in log scale), and the table's last range runs to the server's --max-num-seqs.
"""

from __future__ import annotations

import math
import re
import statistics

from db.store import Store
from engine.engines.arrivals import tpot_s
from engine.engines.vllm import table_text
from engine.errors import PhoenixError


def levels_of_runs(store: Store, run_ids: list[int], method: str) -> dict[int, dict[int, list]]:
    """{batch level: {k: request rows}} from load-sweep runs of one vLLM method (variants none and <method>-k<N>)."""
    pattern = re.compile(rf"^vllm-(?:(none)|{re.escape(method.replace('_', '-'))}-k([0-9]+))_c([0-9]+)$")
    out: dict[int, dict[int, list]] = {}
    for run_id in run_ids:
        for r in store.requests(run_id):
            m = pattern.match(r.mode)
            if m is None or r.warmup or r.error is not None:
                continue
            k = 0 if m[1] else int(m[2])
            out.setdefault(int(m[3]), {}).setdefault(k, []).append(r)
    if not out:
        raise PhoenixError(f"runs {run_ids} hold no vLLM load rows of none and {method}-k<N>: run `engines load` first")
    return out


def acceptance(levels: dict[int, dict[int, list]]) -> list[float]:
    """Per-position acceptance a_i (unconditional, vLLM's meaning), pooled over every level and k that reached i."""
    proposed: dict[int, int] = {}
    accepted: dict[int, int] = {}
    for by_k in levels.values():
        for k, rows in by_k.items():
            for r in rows if k else []:
                for p in r.positions:
                    proposed[p.position] = proposed.get(p.position, 0) + p.proposed
                    accepted[p.position] = accepted.get(p.position, 0) + p.accepted
    n = max(proposed, default=-1) + 1
    return [accepted.get(i, 0) / proposed[i] if proposed.get(i) else 0.0 for i in range(n)]


def step_cost(rows: list, k: int) -> float | None:
    """Seconds a decode step takes at this level: the median request's TPOT times its tokens per step."""
    costs = []
    for r in rows:
        t = tpot_s(r.latency_s, r.ttft_s, r.output_tokens)
        if t is None:
            continue
        per_step = 1 + r.accepted / r.passes if k and r.passes else 1.0
        costs.append(t * per_step)
    return statistics.median(costs) if costs else None


def learn(store: Store, run_ids: list[int], method: str, max_num_seqs: int = 16) -> dict:
    """The table, the score of every k at every level, and the --speculative-config to paste."""
    levels = levels_of_runs(store, run_ids, method)
    a = acceptance(levels)
    scores: dict[int, dict[int, float]] = {}
    for b, by_k in sorted(levels.items()):
        for k, rows in sorted(by_k.items()):
            cost = step_cost(rows, k)
            if cost and k <= len(a):
                scores.setdefault(b, {})[k] = (1 + sum(a[:k])) / cost  # tokens per second a request
    if not scores or not all(0 in s for s in scores.values()):
        raise PhoenixError("every level needs the none variant (speculation off) to score k = 0 against")
    best = {b: max(s, key=lambda k: (s[k], -k)) for b, s in scores.items()}
    rows = ranges(best, max_num_seqs)
    k_max = max(max(k for _, _, k in rows), 1)
    spec = {"method": method, "num_speculative_tokens": k_max, "num_speculative_tokens_per_batch_size": rows}
    return {
        "table": rows,
        "text": table_text(rows),
        "speculative_config": spec,
        "acceptance_per_position": a,
        "scores": {b: {k: round(v, 3) for k, v in s.items()} for b, s in scores.items()},
        "n": {b: {k: len(r) for k, r in by_k.items()} for b, by_k in levels.items()},
        "runs": run_ids,
    }


def ranges(best: dict[int, int], max_num_seqs: int) -> list[list[int]]:
    """Each batch size 1..max_num_seqs takes the k of the nearest level measured (log scale), merged into vLLM's
    inclusive (first, last, k) ranges."""
    measured = sorted(best)
    top = max(max_num_seqs, measured[-1])
    ks = [best[min(measured, key=lambda m: (abs(math.log(b) - math.log(m)), m))] for b in range(1, top + 1)]
    rows: list[list[int]] = []
    for b, k in enumerate(ks, 1):
        if rows and rows[-1][2] == k:
            rows[-1][1] = b
        else:
            rows.append([b, b, k])
    return rows
