"""Models Phoenix knows by name: where each lives, what it is, and how to get it.

``--target smollm2 --draft smollm2-draft`` works wherever ``embedded`` does. The real
pair is fetched or built once into models/ (never committed) and cached there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
}


def named_dir(name: str, role: str) -> Path | None:
    """The directory a name stands for (None when it is no name), present or not."""
    if name not in NAMED:
        return None
    return NAMED[name].path / role if name == EMBEDDED else NAMED[name].path


def present(name: str, role: str = "target") -> bool:
    path = named_dir(name, role)
    return path is not None and (path / "config.json").exists()


def local_models(models_dir: Path = MODELS_DIR) -> list[str]:
    """Model directories under models/ that no name stands for (distilled drafts, your own), relative to the
    project. Hidden folders are left out: a killed fetch's staging folder is not a model."""
    named = {NAMED[n].path for n in NAMED}
    found = []
    for cfg in sorted(models_dir.glob("**/config.json")):
        hidden = any(part.startswith(".") for part in cfg.relative_to(models_dir).parts)
        if not hidden and not any(cfg.parent == p or p in cfg.parent.parents for p in named):
            found.append(str(cfg.parent.relative_to(models_dir.parent)))
    return found
