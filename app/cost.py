"""A run's cost line: CPU seconds per 1,000 output tokens on every door (a lab run, a load level, a served run)."""

from __future__ import annotations

import streamlit as st

from engine.measure import cost_text


def cost_line(info, summaries) -> None:
    """CPU seconds per 1,000 output tokens: per mode what the run's own process spent on each (a lab run, one request
    or one --concurrency group at a time), per variant what each server's process spent (a load level, over its
    blocks), or what a Phoenix server spent serving (its own run); each with its spread and what it does not cover
    (engine.measure.cost_text)."""
    cfg = info.config or {}
    spent, timed, each = cfg.get("cpu_s") or {}, cfg.get("cpu_tokens") or {}, cfg.get("cpu_each") or {}
    parts = []
    for m in summaries:
        # a run from before the timed tokens were kept counts every row's, as the cost line then did
        text = cost_text(spent.get(m.mode), int(timed.get(m.mode, m.output_tokens)), m.output_tokens, each.get(m.mode))
        parts += [f"{m.mode} {text}"] if text else []
    blocks = cfg.get("blocks") or {}
    for variant, rows in blocks.items() if isinstance(blocks, dict) else ():
        with_cpu = [b for b in rows if isinstance(b, list) and len(b) > 2 and b[2] is not None and b[1]]
        all_tokens = sum(int(b[1]) for b in rows if isinstance(b, list) and len(b) > 1)
        spread = [1000.0 * b[2] / b[1] for b in with_cpu]
        text = cost_text(sum(b[2] for b in with_cpu) if with_cpu else None, sum(int(b[1]) for b in with_cpu),
                         all_tokens, spread)  # fmt: skip
        parts += [f"{variant} {text}"] if text else []
    served = cfg.get("serve_cpu")
    if isinstance(served, dict):
        text = cost_text(served.get("cpu_s"), int(served.get("tokens") or 0), int(served.get("tokens") or 0),
                         served.get("each"))  # fmt: skip
        parts += [f"served traffic {text} (the server's process since it was ready, idle included)"] if text else []
    elif "phoenix_serve" in cfg:
        parts.append("served traffic: not recorded (a server from before it kept its CPU time)")
    if parts:
        st.caption("Cost, CPU-seconds per 1,000 output tokens (spread in brackets): " + "; ".join(parts))
    price = cfg.get("price")
    if isinstance(price, dict) and price.get("usd_per_1k_tokens") is not None:
        st.caption(
            f"Cost at the hardware's price given on import (${price['usd_per_hour']:,.2f} an hour): "
            f"${price['usd_per_1k_tokens']:.4f} per 1,000 output tokens at this level's output throughput"
        )
