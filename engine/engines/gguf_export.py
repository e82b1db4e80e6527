"""Phoenix's drafts as GGUF files llama.cpp's server drafts with: a draft model (llama architecture, for
``--spec-type draft-simple``) and an EAGLE-3 head (architecture ``eagle3``, for ``--spec-type draft-eagle3``).

Written with the ``gguf`` package's GGUFWriter; the repository's converter is not on PyPI. What llama.cpp needs,
checked on its sources (src/models/eagle3.cpp, common/speculative.cpp) and by running it:
- q and k rows permuted into llama.cpp's RoPE layout (the converter's ``LlamaModel.permute``);
- the tokenizer the target's GGUF carries, key for key: a draft whose vocabulary differs is not an error there,
  the server logs "vocabs are not compatible" and serves without speculation;
- for a head: ``eagle3.target_layers`` (3 ids, each the input of that target layer, as Phoenix's taps) and
  ``eagle3.target_hidden_size``; ``d2t`` as absolute target ids (Phoenix stores EAGLE's offsets); no
  ``token_embd`` (the target's is used).
The file's name and its ``phoenix.source_sha256`` carry the hash of the weights it came from.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from engine.catalog import NAMED, SMOLLM2, SMOLLM2_DRAFT, named_dir
from engine.decode.eagle3.checkpoint import is_head_dir
from engine.decode.sources import SOURCES
from engine.engines.config import ExportConfig
from engine.engines.llamacpp import named_gguf
from engine.errors import PhoenixError
from engine.paths import DATA_DIR, ROOT

WEIGHTS = "model.safetensors"


def source_dir(name: str) -> Path:
    path = named_dir(name, "draft") or (Path(name) if Path(name).is_absolute() else ROOT / name)
    if not (path / "config.json").is_file() or not (path / WEIGHTS).is_file():
        raise PhoenixError(f"{name}: no config.json and {WEIGHTS} there ({path}); build it first (`zoo --help`)")
    return path


def source_hash(path: Path) -> str:
    h = hashlib.sha256()
    for part in ("config.json", WEIGHTS):
        with open(path / part, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """Hugging Face's rotate-half q/k rows into llama.cpp's interleaved RoPE pairs (convert_hf_to_gguf.py)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def target_of(model_dir: Path) -> str:
    """The fetched target a draft or head was made for: its card's ``target``, else the folder's own tokenizer (hf).
    SmolLM2's draft predates the card field, so its name says it. A Qwen head exported with SmolLM2's tokenizer
    would serve with speculation silently off ("vocabs are not compatible")."""
    try:
        card = json.loads((model_dir / "phoenix_card.json").read_text())
    except (OSError, ValueError):
        card = {}
    target = card.get("target") if isinstance(card, dict) else None
    if isinstance(target, str) and target in SOURCES:
        return target
    return SMOLLM2 if model_dir.resolve() == NAMED[SMOLLM2_DRAFT].path.resolve() else "hf"


def tokenizer_fields(source: str, model_dir: Path) -> list[tuple]:
    """(key, value, type, sub type) of every ``tokenizer.*`` key to write."""
    import gguf

    if source == "auto":
        source = target_of(model_dir)
    if source == "hf":
        return hf_tokenizer_fields(model_dir)
    if source in SOURCES:
        path = named_gguf(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise PhoenixError(f"--tokenizer {source}: no such GGUF; pass {', '.join(SOURCES)}, a .gguf file or hf")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:  # gguf raises ValueError ("GGUF magic invalid") and others for a file that is not one
        raise PhoenixError(f"--tokenizer {source}: {path} is not a GGUF file ({str(exc)[:80]})") from None
    out = []
    for name, field in reader.fields.items():
        if name.startswith("tokenizer."):
            sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            out.append((name, field.contents(), field.types[0], sub))
    if not out:
        raise PhoenixError(f"{path} has no tokenizer.* keys to copy")
    return out


def hf_tokenizer_fields(model_dir: Path) -> list[tuple]:
    """A byte-level BPE tokenizer.json as llama.cpp's gpt2 tokenizer: tokens by id, special ones as control."""
    import gguf

    spec = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    model = spec.get("model", {})
    if model.get("type") != "BPE":
        raise PhoenixError(f"{model_dir}: only byte-level BPE tokenizers are written from tokenizer.json")
    vocab = dict(model["vocab"])
    added = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
    vocab.update(added)
    size = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(size)]
    for text, i in vocab.items():
        tokens[i] = text
    types = [gguf.TokenType.CONTROL if t in added else gguf.TokenType.NORMAL for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    S, A, U32 = gguf.GGUFValueType.STRING, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT32
    out = [
        ("tokenizer.ggml.model", "gpt2", S, None),
        ("tokenizer.ggml.pre", "default", S, None),
        ("tokenizer.ggml.tokens", tokens, A, S),
        ("tokenizer.ggml.token_type", [int(t) for t in types], A, gguf.GGUFValueType.INT32),
        ("tokenizer.ggml.merges", merges, A, S),
        ("tokenizer.ggml.add_bos_token", False, gguf.GGUFValueType.BOOL, None),
    ]
    for key, name in (("bos_token_id", "bos"), ("eos_token_id", "eos"), ("pad_token_id", "padding")):
        value = cfg.get(key)
        value = value[0] if isinstance(value, list) else value
        if isinstance(value, int):
            out.append((f"tokenizer.ggml.{name}_token_id", value, U32, None))
    return out


def _writer(out: Path, arch: str, fields: list[tuple], source: str):
    import gguf

    w = gguf.GGUFWriter(str(out), arch)
    for key, value, vtype, sub in fields:
        w.add_key_value(key, value, vtype, sub_type=sub)
    w.add_string("phoenix.source_sha256", source)
    return w


def _matrix(t, dtype: str) -> np.ndarray:
    return t.float().numpy().astype(np.float16 if dtype == "f16" else np.float32)


def _common(w, cfg: dict, layers: int, hidden: int, dtype: str) -> None:
    heads = cfg["num_attention_heads"]
    w.add_block_count(layers)
    w.add_context_length(int(cfg.get("max_position_embeddings", 8192)))
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(cfg.get("num_key_value_heads", heads))
    w.add_rope_freq_base(float(cfg.get("rope_theta") or cfg.get("rope_parameters", {}).get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    w.add_rope_dimension_count(int(cfg.get("head_dim") or hidden // heads))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(1 if dtype == "f16" else 0)  # llama.cpp's MOSTLY_F16 or ALL_F32


LLAMA = {  # Hugging Face name -> GGUF name, {i} the layer
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.{i}.input_layernorm.weight": "blk.{i}.attn_norm.weight",
    "model.layers.{i}.self_attn.q_proj.weight": "blk.{i}.attn_q.weight",
    "model.layers.{i}.self_attn.k_proj.weight": "blk.{i}.attn_k.weight",
    "model.layers.{i}.self_attn.v_proj.weight": "blk.{i}.attn_v.weight",
    "model.layers.{i}.self_attn.o_proj.weight": "blk.{i}.attn_output.weight",
    "model.layers.{i}.post_attention_layernorm.weight": "blk.{i}.ffn_norm.weight",
    "model.layers.{i}.mlp.gate_proj.weight": "blk.{i}.ffn_gate.weight",
    "model.layers.{i}.mlp.up_proj.weight": "blk.{i}.ffn_up.weight",
    "model.layers.{i}.mlp.down_proj.weight": "blk.{i}.ffn_down.weight",
}
EAGLE3 = {
    "fc.weight": "fc.weight",
    "midlayer.input_layernorm.weight": "blk.0.attn_norm.weight",
    "midlayer.hidden_norm.weight": "blk.0.attn_norm_2.weight",
    "midlayer.self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "midlayer.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "midlayer.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "midlayer.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "midlayer.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "midlayer.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "midlayer.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "midlayer.mlp.down_proj.weight": "blk.0.ffn_down.weight",
    "norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def _gguf_name(hf: str, table: dict) -> str | None:
    parts = hf.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            key = ".".join(parts[:i] + ["{i}"] + parts[i + 1 :])
            return table[key].format(i=part) if key in table else None
    return table.get(hf)


def _add_weight(w, target: str, t, dtype: str, heads: int, kv: int) -> None:
    """One weight under its GGUF name: norms in f32, matrices in ``dtype``, q and k rows in llama.cpp's RoPE order."""
    array = t.float().numpy().astype(np.float32) if t.ndim == 1 else _matrix(t, dtype)
    if target.endswith("attn_q.weight"):
        array = permute(array, heads)
    elif target.endswith("attn_k.weight"):
        array = permute(array, kv)
    w.add_tensor(target, array)


def write_llama(model_dir: Path, out: Path, fields: list[tuple], dtype: str, source: str) -> int:
    """A LlamaForCausalLM draft; tied embeddings write no output.weight (llama.cpp then uses token_embd)."""
    from safetensors.torch import load_file

    cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if "LlamaForCausalLM" not in (cfg.get("architectures") or []):
        raise PhoenixError(
            f"{model_dir}: a draft model for GGUF must be LlamaForCausalLM, got {cfg.get('architectures')}"
        )
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    w = _writer(out, "llama", fields, source)
    _common(w, cfg, cfg["num_hidden_layers"], cfg["hidden_size"], dtype)
    n = 0
    for name, t in load_file(str(model_dir / WEIGHTS)).items():
        target = _gguf_name(name, LLAMA)
        if target is None:
            raise PhoenixError(f"{model_dir}: tensor {name} has no place in a llama GGUF")
        if target == "output.weight" and cfg.get("tie_word_embeddings"):
            continue
        _add_weight(w, target, t, dtype, heads, kv)
        n += 1
    _finish(w)
    return n


def write_eagle3(head_dir: Path, out: Path, fields: list[tuple], dtype: str, source: str) -> int:
    """Phoenix's EAGLE-3 head (engine.decode.eagle3) under llama.cpp's eagle3 architecture."""
    import gguf
    from safetensors.torch import load_file

    if not is_head_dir(head_dir):
        raise PhoenixError(f"{head_dir}: not an EAGLE-3 head (its config.json names no Eagle3 architecture)")
    cfg = json.loads((head_dir / "config.json").read_text(encoding="utf-8"))
    taps = head_taps(head_dir)
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    w = _writer(out, "eagle3", fields, source)
    _common(w, cfg, 1, cfg["hidden_size"], dtype)
    w.add_array("eagle3.target_layers", [int(t) for t in taps])
    w.add_uint32("eagle3.target_hidden_size", int(cfg.get("target_hidden_size", cfg["hidden_size"])))
    n = 0
    for name, t in load_file(str(head_dir / WEIGHTS)).items():
        if name == "t2d":
            continue  # the inverse of d2t; llama.cpp reads d2t alone
        if name == "d2t":  # EAGLE's offsets to absolute target ids
            ids = (np.arange(t.shape[0], dtype=np.int64) + t.numpy().astype(np.int64)).astype(np.int64)
            w.add_tensor("d2t", ids, raw_dtype=gguf.GGMLQuantizationType.I64)
            n += 1
            continue
        target = _gguf_name(name, EAGLE3)
        if target is None:
            raise PhoenixError(f"{head_dir}: tensor {name} has no place in an eagle3 GGUF")
        _add_weight(w, target, t, dtype, heads, kv)
        n += 1
    _finish(w)
    return n


def head_taps(head_dir: Path) -> list[int]:
    cfg = json.loads((head_dir / "config.json").read_text(encoding="utf-8"))
    taps = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if not taps or len(taps) != 3:
        raise PhoenixError(f"{head_dir}: llama.cpp's eagle3 needs 3 target layers, the config has {taps}")
    return taps


def _finish(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


GGUF_MAGIC = b"GGUF"


def check_out(out: Path) -> None:
    """--out is a file Phoenix may write: never a folder, never under a file, and never a file that is not a GGUF
    (`--out notes.txt` once replaced the notes). One line each, before any work."""
    if out.is_dir():
        raise PhoenixError(f"--out {out} is a folder: name the .gguf file to write", field="out")
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            raise PhoenixError(f"--out {out}: {parent} is a file, not a folder", field="out")
    if out.exists():
        with open(out, "rb") as f:
            if f.read(4) != GGUF_MAGIC:
                raise PhoenixError(f"--out {out} exists and is not a GGUF: Phoenix replaces only its own GGUFs", "out")


def export(name: str, cfg: ExportConfig) -> dict:
    """Write the GGUF of ``name`` (a named draft: smollm2-draft, smollm2-eagle3; or a model folder) into a
    temporary name, renamed when whole, and say what it is."""
    path = source_dir(name)
    digest = source_hash(path)
    head = is_head_dir(path)
    if head:
        head_taps(path)  # before the tokenizer is read: the source's own problem first
    out = Path(cfg.out) if cfg.out else DATA_DIR / "gguf" / f"{Path(name).name}-{digest[:12]}.gguf"
    check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    fields = tokenizer_fields(cfg.tokenizer, path)
    try:
        n = (write_eagle3 if head else write_llama)(path, partial, fields, cfg.dtype, digest)
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return {"path": str(out), "kind": "eagle3" if head else "llama", "tensors": n, "source_sha256": digest}


def gguf_of(name: str) -> Path:
    """The GGUF llama.cpp drafts with for ``name``: a .gguf file as it is, else the named draft's export (written
    once per weights: its name carries their hash)."""
    if name.endswith(".gguf"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise PhoenixError(f"{name}: no such GGUF file")
        return path
    if name in SOURCES:  # a fetched model drafts as the GGUF it came from (the 0.5B for the 1.5B)
        return named_gguf(name)
    path = source_dir(name)
    out = DATA_DIR / "gguf" / f"{Path(name).name}-{source_hash(path)[:12]}.gguf"
    return out if out.is_file() else Path(export(name, ExportConfig(out=str(out)))["path"])
