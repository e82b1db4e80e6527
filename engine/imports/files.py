"""A result file read within bounds: its size checked before it is read, one read of at most the limit, UTF-8 or
refused in one line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from engine.errors import PhoenixError

MAX_BYTES = 256 << 20  # a --save-detailed result of 10,000 requests is about 20 MB; past this a file is refused


def read_text(path: Path) -> tuple[str, str]:
    """A file's text and SHA-256, from one bounded read."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise PhoenixError(f"{path}: {size:,} bytes, over the {MAX_BYTES >> 20} MB an import takes")
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise PhoenixError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8"), hashlib.sha256(raw).hexdigest()
    except UnicodeDecodeError:
        raise PhoenixError(f"{path}: not UTF-8 text (a result file is JSON or a Prometheus scrape)") from None


def read(path: Path) -> tuple[list[dict], str]:
    """The JSON objects of a file (one object, a list of them, or one per line: --append-result) and the file's
    SHA-256."""
    text, digest = read_text(path)
    try:
        doc = json.loads(text)
        docs = doc if isinstance(doc, list) else [doc]
    except ValueError:
        try:
            docs = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise PhoenixError(f"{path}: not JSON (nor one JSON object per line): {exc}") from None
    if not docs or not all(isinstance(d, dict) for d in docs):
        raise PhoenixError(f"{path}: holds no result object")
    return docs, digest
