"""--eval: the same held-out prompts through the bench with the original and the
distilled draft, compared side by side per arm."""
from __future__ import annotations

from db import distills, queries
from db.store import Store, mode_summaries, position_counts
from engine.analysis import welch
from engine.bench import BenchConfig
from engine.distill import DistillConfig


def evaluate(store: Store, cfg: DistillConfig, out_dir: str, distill_id: int, progress: bool = True) -> dict:
    from engine.bench_run import create_run, execute

    ks = [int(k) for k in cfg.eval_ks.split(",") if k.strip()]
    modes = ["target"] + [f"fixed_{k}" for k in ks]
    runs = {}
    for label, draft in (("before", cfg.draft), ("after", out_dir)):
        bench = BenchConfig(target=cfg.target, draft=draft, prompts=cfg.eval_prompts, limit=cfg.eval_limit,
                            max_new_tokens=cfg.eval_max_new_tokens, modes=modes, seed=cfg.seed, device=cfg.device,
                            dtype="float32", allow_pickle=cfg.allow_pickle, name=f"distill #{distill_id} {label}")
        run = create_run(store, bench)
        distills.set_fields(store, distill_id, **{f"{label}_run_id": run.id})
        execute(store, run.id, bench, progress=progress)
        runs[label] = run.id
    evaluation = compare(store, runs["before"], runs["after"], [f"fixed_{k}" for k in ks])
    distills.set_fields(store, distill_id, evaluation=evaluation)
    return evaluation


def _arm(store: Store, run_id: int, mode: str) -> dict:
    rows = [r for r in position_counts(store, run_id) if r[0] == mode]
    drafts = rows[0][3] if rows else 0
    summary = next((m for m in mode_summaries(store, run_id) if m.mode == mode), None)
    tps = queries.rewards(store, run_id, [mode])["tokens_per_s"].tolist()
    return {"per_position": [acc / drafts if drafts else None for (_, _, _, _, acc) in rows],
            "acceptance": summary.acceptance if summary else None, "tokens_per_s": summary.tokens_per_s if summary else None,
            "speedup": summary.speedup if summary else None, "n": len(tps), "tokens_per_s_each": tps}


def compare(store: Store, before: int, after: int, modes: list[str]) -> dict:
    """Per arm: unconditional per-position acceptance, overall acceptance, tokens/sec and x target,
    before and after, with Welch's test of tokens/sec (after minus before)."""
    arms = {}
    for mode in modes:
        b, a = _arm(store, before, mode), _arm(store, after, mode)
        w = welch(b.pop("tokens_per_s_each"), a.pop("tokens_per_s_each"))
        arms[mode] = {"before": b, "after": a, "welch": None if w is None else
                      {"diff": w.diff, "p_value": w.p_value, "ci": [w.ci_low, w.ci_high], "verdict": w.verdict}}
    overall = {}
    for label, run_id in (("before", before), ("after", after)):
        ms = [m for m in mode_summaries(store, run_id) if m.mode in modes]
        prop, acc = sum(m.proposed for m in ms), sum(m.accepted for m in ms)
        overall[label] = acc / prop if prop else None
    return {"before_run_id": before, "after_run_id": after, "arms": arms, "overall_acceptance": overall}


def format_comparison(ev: dict) -> str:
    lines = [f"held-out evaluation: run #{ev['before_run_id']} (before) vs run #{ev['after_run_id']} (after)",
             f"{'arm':<10}{'accept before':>15}{'after':>9}{'tok/s before':>14}{'after':>9}{'x target':>10}{'after':>8}"
             f"{'p (Welch)':>11}  verdict"]
    for mode, r in ev["arms"].items():
        b, a, w = r["before"], r["after"], r["welch"] or {}
        lines.append(f"{mode:<10}{_pct(b['acceptance']):>15}{_pct(a['acceptance']):>9}{_num(b['tokens_per_s']):>14}"
                     f"{_num(a['tokens_per_s']):>9}{_num(b['speedup']):>10}{_num(a['speedup']):>8}"
                     f"{_num(w.get('p_value'), '.4f'):>11}  {w.get('verdict', 'too few requests')}")
        lines.append(f"{'':<10}per position before: " + " ".join(_num(x, ".3f") for x in b["per_position"]))
        lines.append(f"{'':<10}per position after:  " + " ".join(_num(x, ".3f") for x in a["per_position"]))
    o = ev["overall_acceptance"]
    lines.append(f"overall acceptance: {_pct(o['before'])} -> {_pct(o['after'])}")
    return "\n".join(lines)


def _pct(v) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _num(v, fmt: str = ".2f") -> str:
    return "n/a" if v is None else format(v, fmt)
