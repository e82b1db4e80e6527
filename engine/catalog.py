"""Models Phoenix knows by name: where each lives, what it is, and how to get it.

``--target smollm2 --draft smollm2-draft`` works wherever ``embedded`` does. The real pairs are fetched or built
once into models/ (never committed) and cached there. A user's own model folder or GGUF file gets a name of its
own with ``zoo add PATH --name NAME`` (kept in models/added.json); a name never shadows one of Phoenix's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from engine.errors import PhoenixError
from engine.paths import EMBEDDED_DIR, MODELS_DIR


@dataclass(frozen=True)
class Named:
    name: str
    path: Path  # the model directory (for 'embedded': the pair's folder; target/ and draft/ below it)
    what: str  # one line for forms and errors
    get: str  # the command that makes it present
    size_mb: int  # on disk, roughly, so a form can say what a choice costs


EMBEDDED = "embedded"
SMOLLM2 = "smollm2"
SMOLLM2_DRAFT = "smollm2-draft"
SMOLLM2_EAGLE3 = "smollm2-eagle3"
QWEN15 = "qwen2.5-coder-1.5b"
QWEN05 = "qwen2.5-coder-0.5b"
QWEN15_EAGLE3 = "qwen2.5-coder-1.5b-eagle3"
NAMED = {
    EMBEDDED: Named(
        EMBEDDED,
        EMBEDDED_DIR,
        "the embedded tiny pair (tests and offline demos; its text is repetitive)",
        "python -m engine zoo build",
        37,
    ),
    SMOLLM2: Named(
        SMOLLM2,
        MODELS_DIR / "smollm2-135m-instruct",
        "SmolLM2-135M-Instruct (Apache-2.0), 134.5M parameters, dequantized from Q4_1",
        "python -m engine zoo fetch smollm2",
        517,
    ),
    SMOLLM2_DRAFT: Named(
        SMOLLM2_DRAFT,
        MODELS_DIR / "smollm2-draft",
        "Phoenix's draft for SmolLM2-135M-Instruct, distilled from it",
        "python -m engine zoo build-draft smollm2",
        30,
    ),
    SMOLLM2_EAGLE3: Named(
        SMOLLM2_EAGLE3,
        MODELS_DIR / "smollm2-eagle3",
        "Phoenix's EAGLE-3 head for SmolLM2-135M-Instruct (use with --drafter eagle3 or eagle3_<k>)",
        "python -m engine zoo build-head smollm2",
        15,
    ),
    QWEN15: Named(
        QWEN15,
        MODELS_DIR / QWEN15,
        "Qwen2.5-Coder-1.5B-Instruct (Apache-2.0), 1.78B parameters with its untied output layer, dequantized "
        "from Q4_K_M",
        f"python -m engine zoo fetch {QWEN15}",
        7109,
    ),
    QWEN05: Named(
        QWEN05,
        MODELS_DIR / QWEN05,
        "Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), the 1.5B's draft model (same tokenizer), dequantized from "
        "Q4_K_M (converted from the AWQ checkpoint)",
        f"python -m engine zoo fetch {QWEN05}",
        2521,
    ),
    QWEN15_EAGLE3: Named(
        QWEN15_EAGLE3,
        MODELS_DIR / QWEN15_EAGLE3,
        "Phoenix's EAGLE-3 head for Qwen2.5-Coder-1.5B-Instruct, reduced draft vocabulary (use with --drafter "
        "eagle3 or eagle3_<k>)",
        f"python -m engine zoo build-head {QWEN15}",
        139,
    ),
}
HEADS = frozenset({SMOLLM2_EAGLE3, QWEN15_EAGLE3})  # the names that stand for an EAGLE-3 head, not a draft model
# each target's drafts, the best measured first, so `serve --target X` alone serves the best one present: on SmolLM2
# the head (the 18M draft model lost to it in the lab, #78 against #79, and the cold server sitting ran the head,
# #283-#299); on Qwen2.5-Coder-1.5B the 0.5B sibling (#189 against the head's #261). A target with none present
# drafts model-free (prompt lookup)
DRAFTS_FOR = {SMOLLM2: (SMOLLM2_EAGLE3, SMOLLM2_DRAFT), QWEN15: (QWEN05, QWEN15_EAGLE3)}
# the GGUF each fetchable model is assembled into (engine.decode.sources), so a llama.cpp run that served the file
# is shown as the model it is, beside the same model served by Phoenix or vLLM
GGUF_FILES = {
    SMOLLM2: "SmolLM2-135M-Instruct.Q4_1.gguf",
    QWEN15: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    QWEN05: "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf",
}
ADDED = MODELS_DIR / "added.json"  # names a user gave their own models (zoo add)
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def added(registry: Path | None = None) -> dict[str, Named]:
    """The user's names (``zoo add``), each for a folder holding config.json; a registry that is not one is none."""
    path = registry or ADDED
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    out = {}
    for name, entry in raw.items():
        if isinstance(entry, dict) and isinstance(entry.get("path"), str) and name not in NAMED:
            what = str(entry.get("what") or entry["path"])
            out[name] = Named(name, Path(entry["path"]), what, f"python -m engine zoo add PATH --name {name}", 0)
    return out


def register(name: str, path: Path, what: str, registry: Path | None = None) -> None:
    """Give ``path`` (a model folder) the name ``name``; one line where the name is taken or malformed."""
    file = registry or ADDED
    if not NAME.fullmatch(name):
        raise PhoenixError(f"--name {name!r}: use lower-case letters, digits, '.', '_' and '-' (at most 64)")
    if name in NAMED:
        raise PhoenixError(f"--name {name!r} is one of Phoenix's own names; pick another")
    known = added(file)
    if name in known and known[name].path.resolve() != path.resolve():
        raise PhoenixError(f"--name {name!r} already stands for {known[name].path}; pick another name")
    entries = {n: {"path": str(m.path), "what": m.what} for n, m in known.items()}
    entries[name] = {"path": str(path.resolve()), "what": what}
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(file)


def model_name(served: str) -> str:
    """The model a run served, as people name it: a fetched model's GGUF or folder by its name, another path by its
    last part (never this machine's absolute path)."""
    local = Path(served).expanduser().exists() or (MODELS_DIR.parent / served).exists()
    if served.count("/") == 1 and not served.startswith((".", "/", "~")) and not local:
        return served  # a Hugging Face id, whole
    tail = served.rstrip("/").rsplit("/", 1)[-1]
    by_file = {f: n for n, f in GGUF_FILES.items()}
    if tail in by_file:
        return by_file[tail]
    by_folder = {m.path.name: n for n, m in NAMED.items() if n != EMBEDDED}
    return by_folder.get(tail, tail) if "/" in served else served


def lookup(name: str) -> Named | None:
    """Phoenix's name, or one the user added; None when it is no name."""
    return NAMED.get(name) or added().get(name)


def named_dir(name: str, role: str) -> Path | None:
    """The directory a name stands for (None when it is no name), present or not."""
    known = lookup(name)
    if known is None:
        return None
    return known.path / role if name == EMBEDDED else known.path


def present(name: str, role: str = "target") -> bool:
    path = named_dir(name, role)
    return path is not None and (path / "config.json").exists()


def default_draft(target: str) -> str | None:
    """The best measured draft for ``target`` that is on this machine (DRAFTS_FOR), or None: model-free."""
    return next((name for name in DRAFTS_FOR.get(model_name(target), ()) if present(name, "draft")), None)


def own_drafts(target: str) -> tuple[str | None, str | None]:
    """The draft model and the EAGLE-3 head catalogued for ``target`` (None where it has none): what a managed
    engine's speculating variants draft with when no --draft or --head is given, whatever the target."""
    mine = DRAFTS_FOR.get(model_name(target), ())
    return next((d for d in mine if d not in HEADS), None), next((d for d in mine if d in HEADS), None)


def local_models(models_dir: Path = MODELS_DIR) -> list[str]:
    """Model directories under models/ that no name stands for (distilled drafts, your own), relative to the
    project. Hidden folders are left out: a killed fetch's staging folder is not a model."""
    named = {m.path for m in [*NAMED.values(), *added().values()]}
    found = []
    for cfg in sorted(models_dir.glob("**/config.json")):
        hidden = any(part.startswith(".") for part in cfg.relative_to(models_dir).parts)
        if not hidden and not any(cfg.parent == p or p in cfg.parent.parents for p in named):
            found.append(str(cfg.parent.relative_to(models_dir.parent)))
    return found


def is_head_dir(path) -> bool:
    """An EAGLE-3 head's folder: its config.json names an Eagle3 architecture (read without loading anything). The
    one test: the loader, the managed engines and the form ask it."""
    try:
        cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    archs = cfg.get("architectures") if isinstance(cfg, dict) else None
    return isinstance(archs, list) and any("Eagle3" in str(a) for a in archs)
