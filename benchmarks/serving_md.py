"""The results doc's parts for Phoenix's own server: a load level's variants side by side and a live serve run's
choices against batch size, both from engine.analysis.load (the dashboard's figures)."""

from __future__ import annotations

import dataclasses

from db.entities import RunInfo
from db.store import Store
from engine.analysis.load import THROUGHPUT, TPOT, k_by_batch, level_method, level_table, short_command
from engine.analysis.speedup import speedups
from engine.engines.config import LoadConfig
from engine.modes import reference_mode
from engine.serve.config import ServeConfig


def _flags(cls, stored: dict, skip: tuple[str, ...] = ()) -> list[str]:
    default = cls()
    out = []
    for f in dataclasses.fields(cls):
        value = stored.get(f.name, getattr(default, f.name))
        if f.name in skip or value == getattr(default, f.name):
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else f"--no-{f.name.replace('_', '-')}")
        else:
            text = str(value)
            out.append(f"{flag} '{text}'" if " " in text else f"{flag} {text}")
    return out


def cpu_line(info: RunInfo) -> str:
    env = info.config.get("environment") or {}
    return f"CPU: {env.get('cpu') or 'not recorded'}, {env.get('cores') or '?'} cores." if env else ""


def _f(v, fmt: str) -> str:
    return "" if v is None or v != v else format(v, fmt)


def level_md(store: Store, info: RunInfo) -> str:
    """A load level (`engines load`): its command, CPU and the variants' table."""
    cfg = info.config["load"]
    requests = store.served_requests(info.id)
    ref = reference_mode(requests["mode"].unique()) if not requests.empty else None
    table = level_table(requests, info.config.get("wall_s"), ref)
    spread = speedups(store.prompt_rewards(info.id), ref) if ref else {}
    head = (
        "| mode | n | throughput tok/s | x reference (totals) | speedup (per prompt) | TTFT p50 / p95 (s) | "
        "TPOT p50 (ms) | latency p50 / p95 (s) | acceptance | mean batch | identical |"
    )
    rows = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in table.to_dict("records"):
        s = spread.get(r["mode"])
        tpot_ms = r["tpot_p50_s"] * 1000 if r["tpot_p50_s"] is not None else None
        rows.append(
            f"| `{r['mode']}` | {r['n']} | {_f(r['throughput_tok_s'], '.1f')} | "
            f"{_f(r['throughput_x_reference'], '.2f')} | {s.text() if s else ''} | "
            f"{_f(r['ttft_p50_s'], '.2f')} / {_f(r['ttft_p95_s'], '.2f')} | {_f(tpot_ms, '.0f')} | "
            f"{_f(r['latency_p50_s'], '.2f')} / {_f(r['latency_p95_s'], '.2f')} | {_f(r['acceptance'], '.1%')} | "
            f"{_f(r['batch_mean'], '.1f')} | {r['identical']} |"
        )
    command = " ".join(
        ["python -m engine engines load", *_flags(LoadConfig, cfg, ("url",)), "--db benchmarks/results.db"]
    )
    how = level_method(info.config)
    where = "the servers it started" if cfg.get("spec_types") else f"`{cfg.get('url')}`"
    servers = [
        f"- `{sv.get('variant') or sv.get('spec_type')}`: `{short_command(sv['command'])}`"
        for sv in info.config.get("servers") or []
    ]
    figures = info.config.get("figures") or {}
    good = [f"{v} {f['goodput']:.2f} req/s ({f['good_requests']} of {f['requests']})" for v, f in figures.items()
            if f.get("goodput") is not None]  # fmt: skip
    if good:
        slos = next(iter(figures.values())).get("slos_ms") or {}
        how += "; goodput (" + ", ".join(f"{k} <= {v:g} ms" for k, v in slos.items()) + "): " + ", ".join(good)
    rate = info.config.get("request_rate")
    if rate is not None:
        burst, cap = cfg.get("burstiness", 1.0), info.config["level"]
        how += f"; Poisson arrivals at {rate} requests/s (burstiness {burst}), at most {cap} in flight"
    return "\n".join(
        [
            f"Command: `{command}` against {where}; {how}. " + cpu_line(info),
            *(["", "Servers:", "", *servers] if servers else []),
            "",
            *rows,
            "",
            f"{THROUGHPUT}; {TPOT}.",
        ]
    )


def live_md(store: Store, info: RunInfo) -> str:
    """A live serve run: its command and what the tuner chose at each batch size."""
    cfg = info.config["phoenix_serve"]
    steps = store.serve_steps_frame(info.id)
    command = " ".join(
        ["python -m engine serve", *_flags(ServeConfig, cfg, ("api_key",)), "--db benchmarks/results.db"]
    )
    lines = [f"Command: `{command}`. " + cpu_line(info)]
    by_batch = k_by_batch(steps)
    if not by_batch.empty:
        lines += [
            "",
            "What its tuner chose at each batch size (steps where it chose; the rest fixed their own k):",
            "",
            "| batch | steps | mean k | share k = 0 | its estimate x off |",
            "|---:|---:|---:|---:|---:|",
        ]
        for r in by_batch.to_dict("records"):
            lines.append(
                f"| {r['batch']} | {r['n']} | {r['k_mean']:.2f} | {r['off_share']:.0%} | {r['estimate_x_off']:.2f} |"
            )
    return "\n".join(lines)
