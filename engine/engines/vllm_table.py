"""vLLM's per-batch-size k table (Dynamic SD's ``num_speculative_tokens_per_batch_size``), learned from a load
sweep of vLLM on the user's own workload, model, drafter and CPU.

vLLM ships no default table ("hardware and category dependent"), and acceptance alone cannot give one: it stays flat
with the batch while the cost of a wider verify grows (vLLM PR 26504's comment: +23% at batch 1, -16% at batch 32).
So each k is scored at each batch level by what it delivers there, measured: the level's output throughput with
that k (the load sweep's own figure, engine.engines.arrivals, prefill and tail included), and the best k is the
smallest whose throughput is within ``TIE`` of the level's best (a smaller k is cheaper and drifts less, and a few
percent is this machine's noise). k = 0 is speculation off, the none variant. The table then speculates at one k
wherever speculating pays and is off elsewhere (``one_k`` says why: vLLM charges a table for its largest k).
A second score is kept beside it for the reader: a request's decode speed from vLLM's own TPOT and acceptance,
``(1 + sum_{i<k} a_i) / (TPOT x tokens per step)``, with a_i pooled over every level; it leaves out prefill and the
batch's tail, and where the two disagree the measured throughput decides. Batch sizes between the levels take the
nearer level's k (in log scale), and the table's last range runs to the server's --max-num-seqs.
"""

from __future__ import annotations

import math
import re
import statistics

from db.store import Store
from engine.engines.arrivals import tpot_s
from engine.engines.vllm import table_text
from engine.errors import PhoenixError
from engine.measure import tokens_per_pass


def levels_of_runs(store: Store, run_ids: list[int], method: str) -> dict[int, dict[int, list]]:
    """{batch level: {k: request rows}} from load-sweep runs of one vLLM method (variants none and <method>-k<N>)."""
    pattern = re.compile(rf"^vllm-(?:(none)|{re.escape(method.replace('_', '-'))}-k([0-9]+))_c([0-9]+)$")
    out: dict[int, dict[int, list]] = {}
    for run_id in run_ids:
        if _run(store, run_id).config.get("request_rate") is not None:
            continue  # a rate level's batch varies: it is no batch size's evidence
        for r in store.requests(run_id):
            m = pattern.match(r.mode)
            if m is None or r.warmup or r.error is not None:
                continue
            k = 0 if m[1] else int(m[2])
            out.setdefault(int(m[3]), {}).setdefault(k, []).append(r)
    if not out:
        raise PhoenixError(f"runs {run_ids} hold no vLLM load rows of none and {method}-k<N>: run `engines load` first")
    return out


def _run(store: Store, run_id: int):
    run = store.get_run(run_id)
    if run is None:
        raise PhoenixError(f"no run {run_id} in this database")
    return run


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
        per_step = (tokens_per_pass(r.accepted, r.passes) or 1.0) if k else 1.0  # engine.measure's one definition
        costs.append(t * per_step)
    return statistics.median(costs) if costs else None


TIE = 0.02  # a smaller k within 2% of the best throughput is taken


def throughput(store: Store, run_ids: list[int], method: str) -> dict[int, dict[int, float]]:
    """{level: {k: output tokens/s}} from the load runs' own figures (variants none and <method>-k<N>); a level
    measured by several sweeps gets the mean of their figures, so two sweeps' noise partly cancels."""
    prefix = method.replace("_", "-")
    seen: dict[int, dict[int, list[float]]] = {}
    for run_id in run_ids:
        run = _run(store, run_id)
        if run.config.get("request_rate") is not None:
            continue  # a rate level's batch varies: it is no batch size's evidence
        for variant, f in (run.config.get("figures") or {}).items():
            m = re.fullmatch(rf"(?:(none)|{re.escape(prefix)}-k([0-9]+))", variant)
            if m is not None and f.get("answered"):
                by_k = seen.setdefault(int(run.config["level"]), {})
                by_k.setdefault(0 if m[1] else int(m[2]), []).append(f["output_throughput"])
    return {b: {k: statistics.fmean(v) for k, v in by_k.items()} for b, by_k in seen.items()}


def best_k(scores: dict[int, float]) -> int:
    top = max(scores.values())
    return min(k for k, v in scores.items() if v >= (1 - TIE) * top)


def one_k(scores: dict[int, dict[int, float]]) -> dict[int, int]:
    """Each level's k, from one k: speculate at the k with the most throughput (relative to off, summed) over the
    levels where some k beats speculation off, and turn it off elsewhere. In vLLM 0.32 a table entry below the
    table's num_speculative_tokens costs more than that k served statically: in run #94 the table's k = 3 at batch 1
    drafted exactly what static k = 3 drafted (476 drafts, 289 accepted at position 0) and took 2.12 s a request
    against 1.97 s, what static k = 4 took; so a table mixes k values at a price."""
    paying = {b: s for b, s in scores.items() if best_k(s) > 0}
    if not paying:
        return dict.fromkeys(scores, 0)
    ks = sorted({k for s in paying.values() for k in s if k > 0 and all(k in t for t in paying.values())})
    k = max(ks, key=lambda k: (sum(s[k] / s[0] for s in paying.values()), -k)) if ks else 0
    return {b: (k if b in paying and s.get(k, 0) > s[0] else 0) for b, s in scores.items()}


def learn(store: Store, run_ids: list[int], method: str, max_num_seqs: int = 16) -> dict:
    """The table, the score of every k at every level, and the --speculative-config to paste."""
    levels = levels_of_runs(store, run_ids, method)
    a = acceptance(levels)
    model: dict[int, dict[int, float]] = {}
    for b, by_k in sorted(levels.items()):
        for k, rows in sorted(by_k.items()):
            cost = step_cost(rows, k)
            if cost and k <= len(a):
                model.setdefault(b, {})[k] = (1 + sum(a[:k])) / cost  # tokens per second a request
    scores = throughput(store, run_ids, method)
    if not scores or not all(0 in s for s in scores.values()):
        raise PhoenixError("every level needs the none variant (speculation off) to score k = 0 against")
    best = one_k(scores)
    rows = ranges(best, max_num_seqs)
    k_max = max(max(k for _, _, k in rows), 1)
    spec = {"method": method, "num_speculative_tokens": k_max, "num_speculative_tokens_per_batch_size": rows}
    return {
        "table": rows,
        "text": table_text(rows),
        "speculative_config": spec,
        "acceptance_per_position": a,
        "best": best,
        "scores": {b: {k: round(v, 2) for k, v in sorted(s.items())} for b, s in sorted(scores.items())},
        "model": {b: {k: round(v, 2) for k, v in s.items()} for b, s in model.items()},
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
