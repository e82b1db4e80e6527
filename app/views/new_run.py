"""New run: a validated form that queues a run for the background worker. It opens on what pays here (the real
pair's head and model-free drafters once they are fetched), remembers what was entered across pages, and takes a
finished run's settings (`new?from=<run>`, the Run page's "Run again")."""

from __future__ import annotations

import json
from dataclasses import asdict

import streamlit as st

from app import actions, data, form, imports, urlstate, widgets
from engine.catalog import DRAFTS_FOR, EMBEDDED, QWEN05, QWEN15, SMOLLM2, added, local_models
from engine.modes import RUN_DRAFTERS
from engine.policies.registry import policy_names

SAVED = "new_run_values"  # not a widget key, so it outlives the page: Streamlit drops widget state on leaving
DUPLICATE = "new_run_duplicate"  # the settings a duplicate warning was shown for: pressing again queues them
FROM = "new_run_from"  # the run whose settings were last loaded, so a reload does not undo the user's edits


def choices() -> tuple[list[str], list[str]]:
    """Every model Phoenix names, both families (a name not here yet is fetched first), the user's own (zoo add),
    then model folders under models/ no name stands for."""
    local = local_models()  # under models/, the names and a fetch's staging folders left out
    mine = sorted(added())
    targets = [EMBEDDED, SMOLLM2, QWEN15, QWEN05] + mine + local + [form.OTHER]
    drafts = [EMBEDDED, *DRAFTS_FOR[SMOLLM2], *DRAFTS_FOR[QWEN15]] + mine + local + [form.NO_DRAFT, form.OTHER]
    return targets, drafts


def starting_values(targets: list[str], drafts: list[str]) -> dict:
    """The run named by ?from= (once per run id), else what was entered last, else the starting config."""
    source = urlstate.qp_int("from")
    if source is not None and st.session_state.get(FROM) != source:
        info = data.run(data.db_url(), source)
        if info is not None and info.bench is not None:
            st.session_state[FROM] = source
            values = form.values_of(info.bench, targets, drafts)
            values["n_name"] = f"again: {info.name}"[:200]
            st.session_state[SAVED] = values
            for key in values:  # the widgets take the run's values, not what they held
                st.session_state.pop(key, None)
        elif info is None:
            st.warning(f"Run #{source} was not found in this database; the form keeps its own values.")
    if SAVED not in st.session_state:
        st.session_state[SAVED] = form.values_of(form.starting_config(), targets, drafts)
    return st.session_state[SAVED]


def seed(values: dict) -> None:
    """Each widget starts from the saved value unless it holds one already (setting both warns in Streamlit)."""
    for key, value in values.items():
        if key not in st.session_state:
            st.session_state[key] = value


def render() -> None:
    st.title("New run")
    locked = data.read_only()
    if locked:
        st.info(locked)
        return
    imports.panel()
    targets, drafts = choices()
    values = starting_values(targets, drafts)
    if st.session_state.get(FROM) is not None:
        st.caption(f"Settings of run #{st.session_state[FROM]}; change any before queueing.")
    modes_offered = list(dict.fromkeys(form.MODE_CHOICES + list(values["n_modes"])))
    values = {**values, "n_target": _known(values["n_target"], targets), "n_draft": _known(values["n_draft"], drafts)}
    seed(values)
    slots = fields(targets, drafts, modes_offered)
    widgets.demo_buttons("n", st.session_state.get("n_token", ""))
    if not slots.pop("_submitted"):
        return
    entered = {key: st.session_state[key] for key in values}
    st.session_state[SAVED] = entered  # kept whether or not it is valid: a mistake is fixed, not retyped
    denied = actions.permission(st.session_state.get("n_token", ""))
    if denied:
        st.error(denied)
        return
    cfg = form.config_of(entered)
    errors = actions.field_checks(cfg, entered["n_arms"])
    if errors:
        slots["form"].error(f"{len(errors)} field{'s' * (len(errors) != 1)} to fix; each says why below it.")
        for field, message in errors.items():
            widgets.refused(message, slots.get(field, slots["form"]))
        return
    twin = actions.recent_duplicate(cfg)
    mark = json.dumps(asdict(cfg), sort_keys=True, default=str)
    if twin is not None and st.session_state.get(DUPLICATE) != mark:
        st.session_state[DUPLICATE] = mark  # the same press again queues it: a second run on purpose
        slots["form"].warning(
            f"Run #{twin.id} with these very settings was queued moments ago ({twin.status}). Press Queue run again "
            "to queue another one anyway."
        )
        return
    st.session_state.pop(DUPLICATE, None)
    widgets.queued(*actions.queue_run(cfg))


def _known(choice: str, options: list[str]) -> str:
    return choice if choice in options else form.OTHER


def fields(targets: list[str], drafts: list[str], modes: list[str]) -> dict:
    """The form's widgets, laid out; an empty slot under each field holds its error."""
    slots: dict = {}
    with st.form("new_run", enter_to_submit=False):  # Enter in a field once queued a run (three presses, four runs)
        slots["form"] = st.empty()
        c1, c2 = st.columns(2)
        c1.selectbox("Target", targets, format_func=form.label, key="n_target", help=form.models_help(targets))
        c1.text_input("Target path or Hugging Face id (for other…)", key="n_target_typed")
        slots["target"] = c1.empty()
        c2.selectbox("Draft", drafts, format_func=form.label, key="n_draft", help=form.models_help(drafts))
        c2.text_input("Draft path or Hugging Face id (for other…)", key="n_draft_typed")
        slots["draft"] = c2.empty()
        st.radio(
            "Drafter for bandit (and plain k modes)",
            list(RUN_DRAFTERS),
            horizontal=True,
            key="n_drafter",
            help="model: the draft model; ngram: prompt lookup; suffix: suffix trees over this request "
            "and earlier outputs of the run (model-free, adaptive length); eagle3: an EAGLE-3 head "
            "(pick a head, such as smollm2-eagle3 or qwen2.5-coder-1.5b-eagle3, or your head's folder as the draft)",
        )
        st.multiselect(
            "Modes (pick, or type one: target, model_<k>, ngram_<k>, suffix_<k>, eagle3_<k>, hf_<k>, "
            "bandit[:<policy>[:pass]])",
            modes,
            key="n_modes",
            accept_new_options=True,
        )
        slots["modes"] = st.empty()
        b1, b2, b3 = st.columns([2, 1, 1])
        b1.text_input("Bandit arms (k values)", key="n_arms")
        slots["arms"] = b1.empty()
        b2.selectbox("Policy of plain 'bandit'", policy_names(), key="n_policy")
        slots["policy"] = b2.empty()
        b3.radio("k chosen per", ["request", "pass"], horizontal=True, key="n_granularity")
        st.text_input(
            "Drafter arms: a bandit chooses the drafter as well as k (empty: k of the drafter above)",
            placeholder="target,ngram_4,suffix_16,eagle3_3",
            key="n_drafter_arms",
        )
        slots["drafter_arms"] = st.empty()
        st.checkbox("Fall back to k=0 while speculation runs slower than target-only", key="n_fallback")
        slots["fallback"] = st.empty()
        prompt_fields(slots)
        settings(slots)
        st.text_input("Name (empty: the modes joined)", max_chars=200, key="n_name")
        slots["name"] = st.empty()
        actions.token_field("n_token")
        slots["_submitted"] = st.form_submit_button("Queue run", type="primary")
    return slots


def prompt_fields(slots: dict) -> None:
    c3, c4 = st.columns(2)
    c3.selectbox("Prompt set", form.PROMPT_SETS, key="n_prompts")
    c3.text_input("…or a JSONL file path", key="n_prompts_file")
    slots["prompts"] = c3.empty()
    c4.number_input("Prompt limit", 1, form.FORM_LIMITS["max_prompts"], key="n_limit")
    slots["limit"] = c4.empty()
    c4.number_input(
        "Spec-Bench: questions per column (0: use the limit)", 0, form.FORM_LIMITS["max_prompts"], key="n_per_column"
    )
    slots["limit_per_column"] = c4.empty()


def settings(slots: dict) -> None:
    c5, c6, c7 = st.columns(3)
    c5.number_input("Max new tokens", 1, form.FORM_LIMITS["max_new_tokens"], key="n_max_new")
    slots["max_new_tokens"] = c5.empty()
    c6.number_input("Seed (bandit decisions, shadow sampling, sampling)", 0, 2**31 - 1, key="n_seed")
    c6.number_input(
        "Temperature (0: greedy)",
        0.0,
        2.0,
        step=0.1,
        key="n_temperature",
        help="Above 0 every mode samples, exactly in the target's distribution; each prompt draws with one seed in "
        "every mode, so outputs are still checked against target-only token for token",
    )
    slots["temperature"] = c6.empty()
    c7.number_input("Shadow rate (share re-checked)", 0.0, 1.0, step=0.05, key="n_shadow", help=form.SHADOW_HELP)
    slots["shadow_rate"] = c7.empty()
    c7.number_input("Top-p (sampling)", 0.01, 1.0, step=0.05, key="n_top_p")
    slots["top_p"] = c7.empty()
    c8, c9, c10 = st.columns(3)
    c8.selectbox(
        "Prompt format",
        form.PROMPT_FORMATS,
        key="n_format",
        help="auto: through the target's chat template when it has one; chat: always; raw: the text as it is",
    )
    slots["prompt_format"] = c8.empty()
    c9.selectbox("dtype", form.DTYPES, key="n_dtype", help="auto: float32 on CPU, bfloat16 on CUDA")
    c10.selectbox("Device", form.DEVICES, key="n_device")
    slots["device"] = c10.empty()
    c11, _, _ = st.columns(3)
    c11.selectbox("Path", form.FAST, key="n_fast", help=form.FAST_HELP)


render()
