"""Where Phoenix keeps its files, independent of the working directory."""

from __future__ import annotations

import os
from pathlib import Path

from engine.errors import PhoenixError

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "models"
EMBEDDED_DIR = MODELS_DIR / "phoenix-tiny"
DATA_DIR = ROOT / "data"
# what outlives a clone (the vLLM venv): CI's fresh clone on the same machine finds it here
CACHE_DIR = Path(
    os.environ.get("PHOENIX_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "phoenix"
)
RESULTS_DB = ROOT / "benchmarks" / "results.db"  # the committed runs behind every figure in the docs

CARD = "phoenix_card.json"  # every model folder Phoenix writes carries one


def check_ours(path: Path, flag: str = "--out", markers: tuple[str, ...] = (CARD,)) -> None:
    """Before any work: ``path`` must be new, empty, or a folder Phoenix made (it holds one of ``markers``).
    Anything else is the user's, and writing a model over it would replace their files."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise PhoenixError(f"{flag} {path} is a file or a link, not a model folder; pass a new folder path")
    if path.is_dir() and any(path.iterdir()) and not any((path / m).exists() for m in markers):
        raise PhoenixError(
            f"{flag} {path} already holds files that Phoenix did not write; nothing was changed: pass a new folder path"
        )
