"""New run: a validated form that queues a run for the background worker."""

from __future__ import annotations

import streamlit as st

from app import actions, data, widgets
from app.actions import FORM_LIMITS
from engine.bench.config import BenchConfig
from engine.catalog import EMBEDDED, NAMED, SMOLLM2, SMOLLM2_DRAFT, SMOLLM2_EAGLE3, local_models, present
from engine.decode.fetch import FETCHERS
from engine.modes import RUN_DRAFTERS
from engine.policies.registry import policy_names
from engine.policies.wrappers import FallbackConfig
from engine.prompts.sets import NAMED_SETS

MODE_CHOICES = [
    "target",
    "model_2",
    "model_4",
    "model_6",
    "model_8",
    "ngram_4",
    "suffix_4",
    "suffix_16",
    "eagle3_4",
    "hf_4",
    "bandit",
] + [
    f"bandit:{p}"
    for p in (
        "epsilon_greedy",
        "model_based",
        "model_based:pass",
        "ucb1",
        "thompson",
        "ema_hysteresis",
        "contextual_model_based",
    )
]


def label(choice: str) -> str:
    """A named model with what it is, its size, and whether it is here yet."""
    if choice not in NAMED:
        return choice
    named = NAMED[choice]
    state = (
        ""
        if present(choice)
        else (
            " · not here yet: the worker fetches it first"
            if choice in FETCHERS
            else f" · not here yet: run {named.get}"
        )
    )
    return f"{choice} ({named.what}, {named.size_mb} MB){state}"


def render() -> None:
    st.title("New run")
    locked = data.read_only()
    if locked:
        st.info(locked)
        return
    local = local_models()  # under models/, the names and a fetch's staging folders left out
    slots = {}
    with st.form("new_run"):
        c1, c2 = st.columns(2)
        target = c1.selectbox("Target", [EMBEDDED, SMOLLM2] + local + ["other…"], format_func=label, key="n_target")
        target_typed = c1.text_input("Target path or Hugging Face id (for other…)", key="n_target_typed")
        slots["target"] = c1.empty()
        draft = c2.selectbox(
            "Draft",
            [EMBEDDED, SMOLLM2_DRAFT, SMOLLM2_EAGLE3] + local + ["none", "other…"],
            format_func=label,
            key="n_draft",
        )
        draft_typed = c2.text_input("Draft path or Hugging Face id (for other…)", key="n_draft_typed")
        slots["draft"] = c2.empty()
        drafter = st.radio(
            "Drafter for model_<k> and bandit",
            list(RUN_DRAFTERS),
            horizontal=True,
            key="n_drafter",
            help="model: the draft model; ngram: prompt lookup; suffix: suffix trees over this request "
            "and earlier outputs of the run (model-free, adaptive length); eagle3: an EAGLE-3 head "
            "(pick smollm2-eagle3 or your head's folder as the draft)",
        )
        modes = st.multiselect("Modes", MODE_CHOICES, default=["target", "model_4", "bandit"], key="n_modes")
        slots["modes"] = st.empty()
        b1, b2, b3 = st.columns([2, 1, 1])
        arms = b1.text_input("Bandit arms", "0,2,4,6,8", key="n_arms")
        slots["arms"] = b1.empty()
        policy = b2.selectbox("Policy of plain 'bandit'", policy_names(), key="n_policy")
        granularity = b3.radio("k chosen per", ["request", "pass"], horizontal=True, key="n_granularity")
        drafter_arms = st.text_input(
            "Drafter arms: a bandit chooses the drafter as well as k (empty: k of the drafter above)",
            "",
            placeholder="target,ngram_4,suffix_16,eagle3_3",
            key="n_drafter_arms",
        )
        slots["drafter_arms"] = st.empty()
        fallback = st.checkbox("Fall back to k=0 while speculation runs slower than target-only", key="n_fallback")
        c3, c4 = st.columns(2)
        prompts = c3.selectbox("Prompt set", list(NAMED_SETS[::-1]), key="n_prompts")
        prompts_file = c3.text_input("…or a JSONL file path", key="n_prompts_file")
        slots["prompts"] = c3.empty()
        limit = c4.number_input("Prompt limit", 1, FORM_LIMITS["max_prompts"], 5, key="n_limit")
        per_column = c4.number_input(
            "Spec-Bench: questions per column (0: all)", 0, FORM_LIMITS["max_prompts"], 0, key="n_per_column"
        )
        slots["limit"] = c4.empty()
        slots["limit_per_column"] = c4.empty()
        c5, c6, c7 = st.columns(3)
        max_new = c5.number_input("Max new tokens", 1, FORM_LIMITS["max_new_tokens"], 64, key="n_max_new")
        slots["max_new_tokens"] = c5.empty()
        seed = c6.number_input("Seed", 0, 2**31 - 1, 42, key="n_seed")
        shadow = c7.number_input("Shadow rate", 0.0, 1.0, 0.1, 0.05, key="n_shadow")
        slots["shadow_rate"] = c7.empty()
        name = st.text_input("Name", "demo", max_chars=200, key="n_name")
        token = actions.token_field("n_token")
        slots["form"] = st.empty()
        submitted = st.form_submit_button("Queue run", type="primary")
    widgets.demo_buttons("n", token)
    if not submitted:
        return
    denied = actions.permission(token)
    if denied:
        st.error(denied)
        return
    cfg = BenchConfig(
        target=target_typed.strip() if target == "other…" else target,
        draft=None if draft == "none" else (draft_typed.strip() if draft == "other…" else draft),
        drafter=drafter,
        prompts=prompts_file.strip() or prompts,
        limit=int(limit),
        max_new_tokens=int(max_new),
        limit_per_column=int(per_column) or None,
        drafter_arms=[a.strip() for a in drafter_arms.split(",") if a.strip()],
        modes=list(modes),
        policy=policy,
        granularity=granularity,
        fallback=FallbackConfig(enabled=bool(fallback)),
        seed=int(seed),
        name=name.strip(),
        shadow_rate=float(shadow),
        max_new_tokens_cap=FORM_LIMITS["max_new_tokens"],
        max_prompts=FORM_LIMITS["max_prompts"],
    )
    errors = actions.field_checks(cfg, arms)
    if errors:
        for field, message in errors.items():
            widgets.refused(message, slots.get(field, slots["form"]))
        return
    widgets.queued(*actions.queue_run(cfg))


render()
