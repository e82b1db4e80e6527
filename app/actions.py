"""The writes the pages trigger (queue, cancel, resume) and who may make them.
Viewing is always read-only and open."""

from __future__ import annotations

import hmac
import json
import os
import re
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import streamlit as st

from app import data, form
from app.form import drafters_of
from engine.bench.config import BenchConfig, validate
from engine.bench.setup import create_run
from engine.catalog import HEADS, NAMED, SMOLLM2, SMOLLM2_DRAFT, SMOLLM2_EAGLE3, present
from engine.decode.eagle3 import is_head_dir
from engine.decode.fetch import FETCHERS
from engine.decode.loading import check_same_tokenizer_files, has_chat_template, resolve
from engine.errors import PhoenixError
from engine.modes import Mode
from engine.paths import DATA_DIR, MODELS_DIR, ROOT
from engine.prompts.sets import NAMED_SETS
from engine.prompts.sets import load as load_prompts
from engine.queue.autostart import ensure_worker, worker_alive_here

LOCAL = ("127.0.0.1", "localhost", "::1")


def token_field(key: str) -> str:
    if os.environ.get("PHOENIX_OPERATOR_TOKEN"):
        return st.text_input("Operator token", type="password", key=key)
    return ""


def permission(given: str) -> str | None:
    """None when the action is allowed, else the reason it is not."""
    locked = data.read_only()
    if locked:
        return locked
    token = os.environ.get("PHOENIX_OPERATOR_TOKEN", "")
    if token:
        if given and hmac.compare_digest(given.encode(), token.encode()):
            return None
        return "Enter the operator token (PHOENIX_OPERATOR_TOKEN) to start or cancel runs."
    # Unset means Streamlit listens on every interface, so it is not local.
    address = (st.get_option("server.address") or "").strip()
    if address in LOCAL:
        return None
    return (
        "This dashboard is reachable beyond localhost: set PHOENIX_OPERATOR_TOKEN on the server to allow "
        "starting and cancelling runs."
    )


def demo_config(real: bool | None = None) -> BenchConfig:
    """The quick demo: the real pair once it is here (or when asked for: the worker fetches the target first),
    else the embedded one. On the real pair it leads with the drafters that pay there (the EAGLE-3 head where it
    is built, suffix trees and prompt lookup, model_1 of the draft model), not the draft model at k = 4 (0.55x)."""
    real = form.real_pair_present() if real is None else real
    if not real:
        # 8 prompts and arms 0, 2, 4: the bandit's forced first tries (each arm twice) end at decision 6, so its
        # epsilon and running estimates have real decisions to show (5 prompts over 5 arms never left them)
        return BenchConfig(
            limit=8,
            max_new_tokens=64,
            name="demo (embedded pair)",
            modes=["target", "model_4", "bandit"],
            arms=[0, 2, 4],
        )
    # the head where it is built, else the draft model at its best k, else (a fresh machine: the worker fetches
    # the target, and nothing builds a draft) the model-free drafters alone
    head, draft = form.present(SMOLLM2_EAGLE3), form.present(SMOLLM2_DRAFT)
    drafted = (["eagle3_3"], SMOLLM2_EAGLE3, "eagle3") if head else (["model_1"], SMOLLM2_DRAFT, "model")
    modes, draft_name, drafter = drafted if head or draft else ([], None, "model")
    return BenchConfig(
        target=SMOLLM2,
        draft=draft_name,
        drafter=drafter,
        limit=8,
        max_new_tokens=64,
        prompt_format="chat",
        name="demo (SmolLM2-135M)",
        modes=["target", *modes, "suffix_16", "ngram_8"],
    )


REQUEST_S = {SMOLLM2: 4.0}  # seconds a 64-token request of the real pair takes on a quiet 2-core CPU (fp32);
# the embedded pair's take a fraction of one


def demo_length(cfg: BenchConfig) -> str:
    """How long a demo will take, said before it starts: its requests, its warm-ups, and minutes at the pace
    measured on a quiet 2-core machine (a busy one takes longer: the real-pair demo once took 45 minutes)."""
    n, warm = (cfg.limit or 0) * len(cfg.modes), len(cfg.modes)
    per = REQUEST_S.get(cfg.target, 0.3) * cfg.max_new_tokens / 64
    minutes = max(1, round((n + warm) * per / 60))
    return f"{n} requests after {warm} untimed warm-ups, about {minutes} min on a quiet 2-core CPU"


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
        Mode.parse(mode)


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def data_roots() -> list[Path]:
    """The only folders the form may read: models/, data/, the Hugging Face cache and $PHOENIX_DATA_ROOTS."""
    from huggingface_hub import constants

    extra = [p for p in os.environ.get("PHOENIX_DATA_ROOTS", "").split(os.pathsep) if p.strip()]
    return [Path(r).expanduser().resolve() for r in [MODELS_DIR, DATA_DIR, constants.HF_HUB_CACHE, *extra]]


def rooted(text: str, what: str) -> str:
    """The absolute path of ``text`` inside a data root; one message for anything else, so the form never tells
    which files exist elsewhere on the server. Relative paths are taken from the project root, not the cwd."""
    path = Path(text).expanduser()
    path = (path if path.is_absolute() else ROOT / path).resolve()
    if not any(path.is_relative_to(root) for root in data_roots()):
        raise PhoenixError(
            f"{what} paths must lie inside models/, data/, the Hugging Face cache or a folder in "
            "PHOENIX_DATA_ROOTS; a relative path starts at the project folder (e.g. data/prompts.jsonl)"
        )
    return str(path)


LOCAL_FOLDERS = ("models", "data")  # "models/x" names a folder here, never a Hugging Face repository


def form_model(text: str, role: str) -> str:
    """A named model, a hub id, or a path inside the roots."""
    if not text.strip():
        raise PhoenixError(
            f"{role} model: you chose other…; type a model folder (e.g. models/my-draft) or a "
            "Hugging Face id (e.g. Qwen/Qwen3-0.6B)"
        )
    local = text.split("/", 1)[0] in LOCAL_FOLDERS
    if text in NAMED or (HUB_ID.fullmatch(text) and not local and not (ROOT / text).exists()):
        return text
    path = rooted(text, f"{role} model")
    if local and not Path(path).exists():
        raise PhoenixError(
            f"{role} model: there is no {text} in this project; build or fetch it first (`python -m "
            "engine zoo --help`), or pick a model from the list"
        )
    return path


def form_prompts(text: str) -> str:
    return text if text in NAMED_SETS else rooted(text, "prompt file")


def field_checks(cfg: BenchConfig, arms_text: str) -> dict[str, str]:
    """Each field of the New run form on its own, so every invalid one gets its own message."""
    errors: dict[str, str] = {}
    cfg.target = _check(errors, "target", lambda: form_model(cfg.target, "target")) or cfg.target
    if cfg.draft is not None:  # "" is other… with nothing typed: said so, not taken for no draft
        cfg.draft = _check(errors, "draft", lambda: form_model(cfg.draft, "draft")) or cfg.draft
    cfg.prompts = _check(errors, "prompts", lambda: form_prompts(cfg.prompts)) or cfg.prompts
    # every field is checked, not just the first bad one: a bad model id must not hide k = 99 until the next submit
    fetched_later = cfg.target in FETCHERS and not present(cfg.target)  # the worker fetches it before the run
    t = d = None
    if "target" not in errors and not fetched_later:
        t = _check(errors, "target", lambda: resolve(cfg.target, "target"))
    if "draft" not in errors and cfg.draft:
        d = _check(errors, "draft", lambda: resolve(cfg.draft, "draft"))
    if t is not None and d is not None:
        _check(errors, "draft", lambda: check_same_tokenizer_files(t, d, cfg.target, cfg.draft))
    if t is not None and cfg.prompt_format == "chat" and not has_chat_template(t):  # the worker's failure, said first
        errors["prompt_format"] = f"{cfg.target!r} has no chat template; use raw (or auto, which picks raw for it)"
    _check(errors, "modes", lambda: _check_modes(cfg))
    try:
        cfg.arms = [int(a) for a in arms_text.split(",") if a.strip()]
    except ValueError:
        errors["arms"] = f"arms must be comma-separated whole numbers, got {arms_text!r}"
    if "prompts" not in errors:
        _check(errors, "prompts", lambda: load_prompts(cfg.prompts, cfg.limit, cfg.limit_per_column))
    for field, message in validation_errors(cfg).items():
        errors.setdefault(field, message)
    if "draft" not in errors and "modes" not in errors and "drafter_arms" not in errors:
        _check(errors, "draft", lambda: check_draft_kind(cfg, d))
    return errors


def validation_errors(cfg: BenchConfig) -> dict[str, str]:
    """validate's complaint about each field: it stops at the first, so the field it named is set right (a copy
    of it) and it runs again, until the config passes or a field repeats."""
    import copy

    errors: dict[str, str] = {}
    trial = copy.deepcopy(cfg)
    defaults = BenchConfig()
    for _ in range(12):
        try:
            validate(trial)
        except PhoenixError as exc:  # the error names its field; the form puts the message beside it
            field = (exc.field or "form").split(".")[0]
            if field in errors or not hasattr(defaults, field):
                errors.setdefault(field, str(exc))
                break
            errors[field] = str(exc)
            setattr(trial, field, copy.deepcopy(getattr(defaults, field)))
            if field == "modes":
                trial.modes = ["target"]
            continue
        break
    if not errors:
        validate(cfg)  # the real one: it names every mode under its drafter's name
    return errors


def check_draft_kind(cfg: BenchConfig, draft_dir) -> None:
    """eagle3 modes draft with an EAGLE-3 head and model modes with a draft model: the wrong one for the modes
    would load and then fail in the worker, so the form says it first."""
    if not cfg.draft:
        return
    if draft_dir is not None:
        head = is_head_dir(draft_dir)
    elif cfg.draft in NAMED:
        head = cfg.draft in HEADS
    else:
        return
    drafters = drafters_of(cfg)
    headed = sorted(drafters & {"eagle3", "hybrid"})
    if headed and not head:
        raise PhoenixError(
            f"{' and '.join(headed)} modes draft with an EAGLE-3 head, and {cfg.draft} is a draft model: pick "
            f"a head ({', '.join(sorted(HEADS))}) or your head's folder as the draft, or use model_<k> modes"
        )
    if head and drafters & {"model"}:
        raise PhoenixError(
            f"{cfg.draft} is an EAGLE-3 head; model_<k> modes (and bandits of --drafter model) need a draft model: "
            "use eagle3_<k> modes, the eagle3 drafter, or pick a draft model"
        )


DUPLICATE_S = 60.0  # a run with the very same settings queued this recently is probably a second press


def recent_duplicate(cfg: BenchConfig, now: datetime | None = None):
    """A run with the very same settings created in the last DUPLICATE_S, whatever it has become since (a free
    worker can finish a small run before the second press lands), or None."""
    mine = json.loads(json.dumps(asdict(cfg), default=str))
    now = now or datetime.now(UTC)
    for run in data.store().list_runs(limit=20):
        created = run.created_at if run.created_at.tzinfo else run.created_at.replace(tzinfo=UTC)
        if (now - created).total_seconds() <= DUPLICATE_S:
            if run.config.get("bench") == mine:
                return run
    return None


def queue_run(cfg: BenchConfig):
    """Write the queued run and make sure a worker will take it; (run, worker state, worker log)."""
    run = create_run(data.store(), cfg, status="queued")
    data.runs.clear()
    return (run, *ensure_worker(data.db_url()))


def cancel_run(run_id: int) -> str | None:
    status = data.store().request_cancel(run_id)
    _changed()
    return status


def resume_run(run_id: int) -> bool:
    ok = data.store().requeue(run_id)
    ensure_worker(data.db_url())
    _changed()
    return ok


def _changed() -> None:
    data.changed()


def set_tags(run_id: int, tags: list[str]) -> list[str]:
    """The run's tags become exactly ``tags``, in one transaction: a bad tag leaves every tag as it was."""
    left = data.store().set_tags(run_id, list(tags))
    _changed()
    return left


def set_note(run_id: int, text: str) -> None:
    data.store().set_note(run_id, text)
    _changed()


def set_archived(run_id: int, archived: bool) -> None:
    data.store().set_archived(run_id, archived)
    _changed()


def delete_run(run_id: int) -> int:
    n = data.store().delete_run(run_id, worker_alive=worker_alive_here)
    _changed()
    return n


def pin_baseline(run_id: int) -> str:
    target = data.store().set_baseline(run_id)
    _changed()
    return target
