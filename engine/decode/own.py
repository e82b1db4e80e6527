"""The user's own models: any Hugging Face folder or GGUF file they already have, as ``--target``/``--draft``
directly or under a name of their own (``zoo add PATH --name NAME``).

A GGUF is dequantized once into a plain safetensors folder (transformers would otherwise keep the weights packed and
compute in float32 kernels: 0.4 tok/s for Qwen2.5-0.5B here) and kept: a named one under models/NAME, one passed as
a path in Phoenix's cache, keyed by the file's path, size and time, so a changed file is converted again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from engine.catalog import NAME, NAMED, added, register
from engine.decode.eagle3.checkpoint import is_head_dir
from engine.decode.fetch import convert_gguf, general_name, sha256_file
from engine.errors import PhoenixError
from engine.paths import CACHE_DIR, CARD, MODELS_DIR, check_ours


def is_gguf(path: Path) -> bool:
    """A GGUF file: its first four bytes are the magic (the name alone proves nothing)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def convert_into(gguf: Path, out: Path, origin: str) -> dict:
    """Dequantize ``gguf`` into ``out`` (made whole or not at all) with a model card; the card."""
    check_ours(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".fetch-") as tmp:
        staged = Path(tmp) / "model"
        facts = convert_gguf(gguf, staged)
        card = {
            "name": out.name,
            "origin": origin,
            "weights": "dequantized to float32 from the GGUF",
            "gguf": str(gguf),
            "gguf_sha256": sha256_file(gguf),
            "general_name": general_name(gguf),
            **facts,
        }
        (staged / CARD).write_text(json.dumps(card, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)  # ours (checked above): an older conversion
        staged.rename(out)
    return card


def gguf_folder(gguf: Path, cache: Path | None = None) -> Path:
    """The folder a GGUF given as a path converts to, converted on first use."""
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    out = (cache or CACHE_DIR / "gguf-models") / f"{gguf.stem}-{key}"
    if not (out / CARD).is_file():
        print(f"{gguf.name}: dequantizing once into {out} (a few minutes for a 1.5B model)", flush=True)
        convert_into(gguf, out, f"the GGUF file {gguf.resolve()}")
    return out


SIZES = (
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
    "vocab_size", "max_position_embeddings", "head_dim",
)  # fmt: skip


def check_sizes(cfg: dict, spec: str) -> None:
    """A config's sizes are whole numbers of at least 1 (num_hidden_layers: -3 once crashed generate deep inside
    transformers' cache); one line naming the field. The text model's config of a multimodal one is checked too."""
    text: dict = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else {}
    for where in (cfg, text):
        for name in SIZES:
            value = where.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 24:
                raise PhoenixError(f"{spec!r}: config.json says {name} = {value!r}; it must be a whole number >= 1")


def check_decoder_only(cfg: dict, spec: str) -> None:
    """A model Phoenix can decode: a decoder-only causal LM transformers knows (Llama, Qwen2/3, Mistral, Gemma 2/3,
    Phi-3, OLMo 2, GPT-NeoX, StarCoder2, Granite, ...). An encoder (BERT) or an encoder-decoder (T5) is refused here,
    in one line, before any weight is read: loaded as a causal LM, BERT's encoder once failed on missing tensors."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as CAUSAL

    kind = str(cfg.get("model_type"))
    archs = [a for a in cfg.get("architectures") or [] if isinstance(a, str)]
    if any("Eagle" in a for a in archs):  # an EAGLE-3 head: its own loader checks it against its target
        return
    why = None
    if cfg.get("is_encoder_decoder"):
        why = "an encoder-decoder model"
    elif kind not in CAUSAL:
        why = f"model_type {cfg.get('model_type')!r} is no causal LM transformers knows"
    elif archs and not any(a == CAUSAL[kind] or a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        why = f"its config names {', '.join(archs)}, not a causal LM"
    if why is not None:
        raise PhoenixError(f"{spec!r}: {why}; Phoenix decodes decoder-only causal LMs (Llama, Qwen, Gemma, ...)")


def check_model_dir(path: Path, spec: str, allow_pickle: bool = False) -> Path:
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise PhoenixError(
            f"{spec!r} is a directory but not a model (no config.json): pass a Hugging Face model directory"
        )
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise PhoenixError(f"{spec!r}: config.json is not valid JSON; re-export the model") from None
    check_sizes(cfg, spec)
    check_decoder_only(cfg, spec)
    if "auto_map" in cfg:
        raise PhoenixError(
            f"{spec!r} needs trust_remote_code (custom model code); Phoenix never runs model code from disk"
        )
    has_safe = any(path.glob("*.safetensors"))
    has_pickle = any(path.glob("*.bin")) or any(path.glob("*.pt"))
    if not has_safe and not (has_pickle and allow_pickle):
        if has_pickle:
            raise PhoenixError(
                f"{spec!r} has weights only in pickle format: convert them to safetensors, or pass --allow-pickle "
                "to the command that loads them (bench, serve) if you trust the files; zoo add takes safetensors only"
            )
        raise PhoenixError(f"{spec!r} has no weights (*.safetensors): pass a complete model directory")
    return path


def check_not_taken(out: Path, name: str) -> None:
    """``out`` is no other model's folder: not a named model's (models/smollm2-135m-instruct is smollm2's), not
    another added name's, and not a folder this name did not make; an add never removes what it did not create."""
    here = out.resolve()
    for other, model in {**NAMED, **added()}.items():
        if other != name and model.path.resolve() == here:
            raise PhoenixError(f"--name {name!r} would write into {out}, the folder of {other!r}; pick another name")
    if out.exists() and (added().get(name) is None or added()[name].path.resolve() != here):
        raise PhoenixError(f"{out} already exists and is not an earlier add of {name!r}; nothing was changed")


def add(path: str, name: str) -> dict:
    """Register ``path`` (a model folder, an EAGLE-3 head folder or a GGUF file) as ``name``; what was done."""

    source = Path(path).expanduser()
    if not NAME.fullmatch(name):  # before anything is written: ../x, /abs or X never name a folder under models/
        raise PhoenixError(f"--name {name!r}: use lower-case letters, digits, '.', '_' and '-' (at most 64)")
    if name in NAMED:
        raise PhoenixError(f"--name {name!r} is one of Phoenix's own names; pick another")
    if source.is_file():
        if not is_gguf(source):
            raise PhoenixError(f"{path} is a file but not a GGUF; pass a GGUF file or a model folder")
        out = MODELS_DIR / name
        known = added().get(name)
        if known is not None and known.path.resolve() != out.resolve():
            raise PhoenixError(f"--name {name!r} already stands for {known.path}; pick another name")
        check_not_taken(out, name)
        card = convert_into(source, out, f"the GGUF file {source.resolve()}")
        what = f"{card['architecture']}, {card['parameters']:,} parameters, from {source.name}"
        register(name, out, what)
        return {"name": name, "path": str(out), "what": what, "converted": True}
    if not source.is_dir():
        raise PhoenixError(f"{path}: no such file or folder")
    if is_head_dir(source):
        what = f"an EAGLE-3 head in {source.resolve()}"
    else:
        check_model_dir(source, path)
        config = json.loads((source / "config.json").read_text(encoding="utf-8"))
        what = f"{(config.get('architectures') or ['a model'])[0]} in {source.resolve()}"
    register(name, source, what)
    return {"name": name, "path": str(source.resolve()), "what": what, "converted": False}
