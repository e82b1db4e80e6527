"""New run: a validated form that queues a run for the background worker."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from app import common, data, operate
from engine.bench import BenchConfig, parse_mode, validate
from engine.errors import PhoenixError
from engine.policy_wrappers import policy_names
from engine.models import EMBEDDED, check_same_tokenizer_files, resolve
from engine.prompts import NAMED_SETS
from engine.prompts import load as load_prompts

ROOT = Path(__file__).resolve().parent.parent.parent
MODE_CHOICES = ["target", "fixed_2", "fixed_4", "fixed_6", "fixed_8", "ngram_4", "hf_4", "bandit"] + [
    f"bandit:{p}" for p in ("epsilon_greedy", "model_based", "model_based:pass", "ucb1", "thompson", "ema_hysteresis",
                            "contextual_model_based")]


def DEMO() -> BenchConfig:  # noqa: N802  (a constant, built fresh each time)
    return BenchConfig(limit=5, max_new_tokens=64, name="demo", modes=["target", "fixed_4", "bandit"])


FORM_LIMITS = {"max_prompts": 50, "max_new_tokens": 512}  # the form is no DoS lever


def local_models() -> list[str]:
    found = []
    for cfg in sorted((ROOT / "models").glob("**/config.json")):
        rel = cfg.parent.relative_to(ROOT)
        if "phoenix-tiny" not in rel.parts:
            found.append(str(rel))
    return found


def _check(errors: dict, field: str, fn) -> object:
    try:
        return fn()
    except PhoenixError as exc:
        errors[field] = str(exc)
        return None


def _check_modes(cfg: BenchConfig) -> None:
    if not cfg.modes:
        raise PhoenixError("pick at least one mode")
    for mode in cfg.modes:
        parse_mode(mode, cfg.drafter)


def field_checks(cfg: BenchConfig, arms_text: str) -> dict[str, str]:
    """Each field on its own, so every invalid one gets its own message."""
    errors: dict[str, str] = {}
    t = _check(errors, "target", lambda: resolve(cfg.target, "target"))
    d = _check(errors, "draft", lambda: resolve(cfg.draft, "draft")) if cfg.draft else None
    if t is not None and d is not None:
        _check(errors, "draft", lambda: check_same_tokenizer_files(t, d, cfg.target, cfg.draft))
    _check(errors, "modes", lambda: _check_modes(cfg))
    try:
        cfg.arms = [int(a) for a in arms_text.split(",") if a.strip()]
    except ValueError:
        errors["arms"] = f"arms must be comma-separated whole numbers, got {arms_text!r}"
    _check(errors, "prompts", lambda: load_prompts(cfg.prompts, cfg.limit))
    if not errors:
        try:
            validate(cfg)
        except PhoenixError as exc:
            text = str(exc)
            field = next((f for f in ("arms", "modes", "max-new-tokens", "limit", "shadow-rate") if f in text), "form")
            errors[field.replace("-", "_")] = text
    return errors


def render() -> None:
    url = common.guard()
    st.title("New run")
    models = [EMBEDDED] + local_models()
    slots = {}
    with st.form("new_run"):
        c1, c2 = st.columns(2)
        target = c1.selectbox("Target", models + ["other…"], key="n_target")
        target_typed = c1.text_input("Target path or Hugging Face id (for other…)", key="n_target_typed")
        slots["target"] = c1.empty()
        draft = c2.selectbox("Draft", models + ["none", "other…"], key="n_draft")
        draft_typed = c2.text_input("Draft path or Hugging Face id (for other…)", key="n_draft_typed")
        slots["draft"] = c2.empty()
        drafter = st.radio("Drafter for fixed_<k> and bandit", ["model", "ngram"], horizontal=True, key="n_drafter")
        modes = st.multiselect("Modes", MODE_CHOICES, default=["target", "fixed_4", "bandit"], key="n_modes")
        slots["modes"] = st.empty()
        b1, b2, b3 = st.columns([2, 1, 1])
        arms = b1.text_input("Bandit arms", "0,2,4,6,8", key="n_arms")
        slots["arms"] = b1.empty()
        policy = b2.selectbox("Policy of plain 'bandit'", policy_names(), key="n_policy")
        granularity = b3.radio("k chosen per", ["request", "pass"], horizontal=True, key="n_granularity")
        fallback = st.checkbox("Fall back to k=0 while speculation runs slower than target-only", key="n_fallback")
        c3, c4 = st.columns(2)
        prompts = c3.selectbox("Prompt set", list(NAMED_SETS[::-1]), key="n_prompts")
        prompts_file = c3.text_input("…or a JSONL file path", key="n_prompts_file")
        slots["prompts"] = c3.empty()
        limit = c4.number_input("Prompt limit", 1, FORM_LIMITS["max_prompts"], 5, key="n_limit")
        slots["limit"] = c4.empty()
        c5, c6, c7 = st.columns(3)
        max_new = c5.number_input("Max new tokens", 1, FORM_LIMITS["max_new_tokens"], 64, key="n_max_new")
        slots["max_new_tokens"] = c5.empty()
        seed = c6.number_input("Seed", 0, 2**31 - 1, 42, key="n_seed")
        shadow = c7.number_input("Shadow rate", 0.0, 1.0, 0.1, 0.05, key="n_shadow")
        slots["shadow_rate"] = c7.empty()
        name = st.text_input("Name", "demo", max_chars=200, key="n_name")
        token = operate.token_field("n_token")
        slots["form"] = st.empty()
        submitted = st.form_submit_button("Queue run", type="primary")
    demo = st.button("Quick demo on the embedded pair (5 prompts, 64 tokens)", key="n_demo")
    if not (submitted or demo):
        return
    denied = operate.permission(token)
    if denied:
        st.error(denied)
        return
    cfg = BenchConfig(
        target=target_typed.strip() if target == "other…" else target,
        draft=None if draft == "none" else (draft_typed.strip() if draft == "other…" else draft),
        drafter=drafter, prompts=prompts_file.strip() or prompts, limit=int(limit), max_new_tokens=int(max_new),
        modes=list(modes), policy=policy, granularity=granularity, fallback=bool(fallback), seed=int(seed), name=name.strip(), shadow_rate=float(shadow),
        max_new_tokens_cap=FORM_LIMITS["max_new_tokens"], max_prompts=FORM_LIMITS["max_prompts"])
    if demo:
        cfg = DEMO()
    errors = field_checks(cfg, arms if not demo else "0,2,4,6,8")
    if errors:
        for field, message in errors.items():
            slots.get(field, slots["form"]).error(message)
        return
    queue(url, cfg)


def queue(url: str, cfg: BenchConfig) -> None:
    from engine.autostart import ensure_worker
    from engine.bench_run import create_run

    run = create_run(data.store(), cfg, status="queued")
    data.runs.clear()
    worker = ensure_worker(url)
    st.success(f"Run #{run.id} queued ({run.progress_total} requests).")
    st.markdown(f"[Watch run #{run.id} live]({common.public_base()}/run?run={run.id})")
    if worker == "disabled":
        st.caption("Worker autostart is off (PHOENIX_AUTOSTART_WORKER=0): your own workers will pick it up.")
    else:
        st.caption(f"Background worker {worker}; its log is data/worker.log.")


if __name__ == "__main__":  # run as a page by st.navigation; importing renders nothing
    render()
