"""A model's card, as a run keeps it: family, parameters, vocabulary, dtype, where it came from and a hash of what
was loaded. Every run stores its target's and its draft's, so runs of different models are never mistaken for one
another, and the dashboard shows the card beside the figures.

The hash is the source file's where Phoenix made the folder (the GGUF's sha256 from its phoenix_card.json), else
the sha256 of the folder's weight files, remembered in Phoenix's cache (outside the tree) with their sizes and
times (a 7 GB folder is read once, not per run).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from engine.paths import CACHE_DIR, CARD

READ = 1 << 20


def weights_sha256(folder: Path) -> str | None:
    """sha256 over the folder's *.safetensors files in name order; None where there are none."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    mark = ";".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
    # remembered in Phoenix's cache, never in the model folder (a tracked folder was dirty after the first load)
    stamp = CACHE_DIR / "weights-sha256" / f"{hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:24]}.json"
    try:
        known = json.loads(stamp.read_text())
        if known.get("files") == mark:
            return known["sha256"]
    except (OSError, ValueError, AttributeError, KeyError):
        pass
    digest = hashlib.sha256()
    for f in files:
        with open(f, "rb") as handle:
            while block := handle.read(READ):
                digest.update(block)
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps({"folder": str(folder.resolve()), "files": mark, "sha256": digest.hexdigest()}))
    except OSError:  # a read-only folder is hashed again next time
        pass
    return digest.hexdigest()


def card_of(model, tokenizer, name: str, folder: Path | None, dtype: str) -> dict:
    """The card of a loaded model (a transformers model or an EAGLE-3 head)."""
    made = _phoenix_card(folder)
    config = getattr(model, "config", None)
    text = config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
    out = {
        "name": name,
        "family": getattr(text, "model_type", None) or "eagle3-head",
        "architecture": (getattr(config, "architectures", None) or [type(getattr(model, "hf", model)).__name__])[0],
        "parameters": sum(p.numel() for p in model.parameters()),
        "layers": getattr(text, "num_hidden_layers", None),
        "hidden": getattr(text, "hidden_size", None),
        "vocab": len(tokenizer) if tokenizer is not None else getattr(text, "vocab_size", None),
        "output_rows": getattr(text, "vocab_size", None),
        "tied_embeddings": bool(getattr(text, "tie_word_embeddings", False)),
        "chat_template": bool(getattr(tokenizer, "chat_template", None)) if tokenizer is not None else None,
        "dtype": dtype,
        "source": made.get("origin") or (str(folder) if folder else name),
        "license": made.get("license"),
    }
    if made.get("gguf_sha256"):
        out |= {"sha256": made["gguf_sha256"], "sha256_of": "the GGUF it was dequantized from"}
    elif folder is not None:
        out |= {"sha256": weights_sha256(folder), "sha256_of": "its safetensors weights"}
    return out


def _phoenix_card(folder: Path | None) -> dict:
    try:
        card = json.loads((folder / CARD).read_text()) if folder is not None else {}
    except (OSError, ValueError):
        return {}
    return card if isinstance(card, dict) else {}


def card_line(card: dict) -> str:
    """One line of a card, for a page or a report."""
    if not card:
        return "not recorded (this run predates model cards)"
    size = (
        f"{card['parameters'] / 1e9:.2f}B"
        if card.get("parameters", 0) >= 1e9
        else f"{card.get('parameters', 0) / 1e6:.1f}M"
    )
    parts = [
        f"{card.get('name')}: {card.get('family')} ({card.get('architecture')}), {size} parameters",
        f"vocabulary {card['vocab']:,}" if card.get("vocab") else "",
        f"{card.get('layers')} layers x {card.get('hidden')}" if card.get("layers") else "",
        "tied embeddings" if card.get("tied_embeddings") else "untied embeddings",
        f"run in {card.get('dtype')}",
        f"from {card.get('source')}",
        f"sha256 {card['sha256'][:16]}… ({card.get('sha256_of')})" if card.get("sha256") else "",
    ]
    return ", ".join(p for p in parts if p)
