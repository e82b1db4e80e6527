"""--eval: the same held-out prompts through the bench with the original and the
distilled draft, compared side by side per arm."""

from __future__ import annotations

from db.store import Store
from engine.analysis.stats import welch
from engine.bench.config import BenchConfig
from engine.bench.report import summaries
from engine.bench.run import execute
from engine.bench.setup import create_run
from engine.train.config import DistillConfig
from engine.train.distill import eval_ks


def evaluate(store: Store, cfg: DistillConfig, out_dir: str, distill_id: int, progress: bool = True) -> dict:
    ks = eval_ks(cfg)
    modes = ["target"] + [f"model_{k}" for k in ks]
    runs = {}
    for label, draft in (("before", cfg.draft), ("after", out_dir)):
        bench = BenchConfig(
            target=cfg.target,
            draft=draft,
            prompts=cfg.eval_prompts,
            limit=cfg.eval_limit,
            max_new_tokens=cfg.eval_max_new_tokens,
            modes=modes,
            seed=cfg.seed,
            device=cfg.device,
            dtype="float32",
            allow_pickle=cfg.allow_pickle,
            name=f"distill #{distill_id} {label}",
        )
        run = create_run(store, bench)
        store.set_distill_fields(distill_id, **{f"{label}_run_id": run.id})
        execute(store, run.id, bench, progress=progress)
        runs[label] = run.id
    evaluation = compare(store, runs["before"], runs["after"], [f"model_{k}" for k in ks])
    store.set_distill_fields(distill_id, evaluation=evaluation)
    return evaluation


class RunFigures:
    """One run's summaries, per-position counts and per-request tokens/sec, each read once."""

    def __init__(self, store: Store, run_id: int):
        self.summaries = {m.mode: m for m in summaries(store, run_id)}
        self.positions = store.positions(run_id)
        self.rewards = store.rewards(run_id, list(self.summaries))

    def arm(self, mode: str) -> dict:
        rows = self.positions[self.positions["mode"] == mode]
        drafts = int(rows["proposed"].iloc[0]) if len(rows) else 0
        m = self.summaries.get(mode)
        return {
            "per_position": [int(acc) / drafts if drafts else None for acc in rows["accepted"]],
            "acceptance": m.acceptance if m else None,
            "tokens_per_s": m.tokens_per_s if m else None,
            "speedup": m.speedup.median if (m and m.speedup) else None,
            "n": m.n if m else 0,
        }

    def tokens_per_s(self, mode: str) -> list[float]:
        return self.rewards[self.rewards["mode"] == mode]["tokens_per_s"].tolist()

    def acceptance(self, modes: list[str]) -> float | None:
        ms = [self.summaries[m] for m in modes if m in self.summaries]
        prop = sum(m.proposed for m in ms)
        return sum(m.accepted for m in ms) / prop if prop else None


def compare(store: Store, before: int, after: int, modes: list[str]) -> dict:
    """Per arm: unconditional per-position acceptance, overall acceptance, tokens/sec and x target,
    before and after, with Welch's test of tokens/sec (after minus before)."""
    b, a = RunFigures(store, before), RunFigures(store, after)
    arms = {}
    for mode in modes:
        w = welch(b.tokens_per_s(mode), a.tokens_per_s(mode))
        arms[mode] = {
            "before": b.arm(mode),
            "after": a.arm(mode),
            "welch": None
            if w is None
            else {"diff": w.diff, "p_value": w.p_value, "ci": [w.ci_low, w.ci_high], "verdict": w.verdict},
        }
    return {
        "before_run_id": before,
        "after_run_id": after,
        "arms": arms,
        "overall_acceptance": {"before": b.acceptance(modes), "after": a.acceptance(modes)},
    }


def format_comparison(ev: dict) -> str:
    lines = [
        f"held-out evaluation: run #{ev['before_run_id']} (before) vs run #{ev['after_run_id']} (after)",
        f"{'arm':<10}{'accept before':>15}{'after':>9}{'tok/s before':>14}{'after':>9}{'x target':>10}{'after':>8}"
        f"{'p (Welch)':>11}  verdict",
    ]
    for mode, r in ev["arms"].items():
        b, a, w = r["before"], r["after"], r["welch"] or {}
        lines.append(
            f"{mode:<10}{_pct(b['acceptance']):>15}{_pct(a['acceptance']):>9}{_num(b['tokens_per_s']):>14}"
            f"{_num(a['tokens_per_s']):>9}{_num(b['speedup']):>10}{_num(a['speedup']):>8}"
            f"{_num(w.get('p_value'), '.4f'):>11}  {w.get('verdict', 'too few requests')}"
        )
        lines.append(f"{'':<10}per position before: " + " ".join(_num(x, ".3f") for x in b["per_position"]))
        lines.append(f"{'':<10}per position after:  " + " ".join(_num(x, ".3f") for x in a["per_position"]))
    o = ev["overall_acceptance"]
    lines.append(f"overall acceptance: {_pct(o['before'])} -> {_pct(o['after'])}")
    return "\n".join(lines)


def _pct(v) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _num(v, fmt: str = ".2f") -> str:
    return "n/a" if v is None else format(v, fmt)
