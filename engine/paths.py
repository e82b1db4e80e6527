"""Where Phoenix keeps its files, independent of the working directory."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "models"
EMBEDDED_DIR = MODELS_DIR / "phoenix-tiny"
DATA_DIR = ROOT / "data"
