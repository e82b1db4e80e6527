"""Model loading: the embedded pair, local directories and cached Hugging Face ids
all go through one path. Nothing is downloaded and no model code from disk runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.catalog import EMBEDDED, NAMED, lookup, named_dir
from engine.decode.card import card_of
from engine.decode.cuts import calibrate_pair
from engine.decode.eagle3 import default_taps, is_head_dir, load_head
from engine.decode.own import check_model_dir, gguf_folder, is_gguf
from engine.decode.packed import fuse_pair, pack_pair
from engine.decode.runner import use_runner
from engine.errors import PhoenixError
from engine.provenance import native_bf16


@dataclass
class LoadedPair:
    target: Any  # a transformers causal LM
    draft: Any | None
    tokenizer: Any
    target_name: str
    draft_name: str | None
    device: str
    dtype: str
    shared_vocab: int | None = None  # output rows both models have; the draft proposes only from these
    packed: str = "off"  # whether the linear layers run prepacked, and why (engine.decode.packed.pack_pair)
    runner: str = "transformers"  # what runs the forwards (engine.decode.runner.use_runner)
    folders: tuple[Path | None, Path | None] = (None, None)  # where the target and the draft were loaded from

    def cards(self) -> dict:
        """The target's and the draft's model cards (engine.decode.card), as a run stores them."""
        out = {"target": card_of(self.target, self.tokenizer, self.target_name, self.folders[0], self.dtype)}
        if self.draft is not None:
            tok = None if self.shared_vocab is None else self.tokenizer  # a head has no tokenizer of its own
            out["draft"] = card_of(self.draft, tok, self.draft_name or "", self.folders[1], self.dtype)
        return out


def fingerprint(model) -> str | None:
    """sha256 of a model's weights as loaded (names, dtypes and bytes): which draft or head a run drafted with, so
    two runs of `smollm2-eagle3` before and after a build stage say they drafted with different heads."""
    if model is None:
        return None
    import hashlib

    model = getattr(model, "hf", model)  # the model behind Phoenix's runner: the same weights hash the same

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch_uint8()).numpy().tobytes())
    return digest.hexdigest()


def torch_uint8():
    import torch

    return torch.uint8


def pick_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise PhoenixError("--device cuda was asked for but no CUDA device is visible; use --device cpu")
    if device not in ("cpu", "cuda"):
        raise PhoenixError(f"unknown --device {device!r}: use auto, cpu or cuda")
    return device


def pick_dtype(dtype: str, device: str):
    """auto: float32 on the CPU (the lab's exactness is tested there), bfloat16 on CUDA."""
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    if dtype not in ("float32", "bfloat16", "float16"):
        raise PhoenixError(f"unknown --dtype {dtype!r}: use auto, float32, bfloat16 or float16")
    return getattr(torch, dtype)


def serving_dtype(dtype: str, device: str) -> str:
    """The server's dtype for ``auto``: bfloat16 on CUDA and on a CPU with native bf16 (what vLLM and llama.cpp serve
    by default there; SmolLM2's one-row step at 16 rows cost about half of fp32's), float32 elsewhere. Greedy output
    in fp32 stays exact and one flag away (--dtype float32)."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if pick_device(device) == "cuda" or native_bf16() else "float32"


def resolve(spec: str, role: str, allow_pickle: bool = False) -> Path:
    """Turn a known name ('embedded', 'smollm2', ...), a directory or a cached hub id into a checked model directory."""
    named = named_dir(spec, role)
    if named is not None:
        if not (named / "config.json").exists():
            known = lookup(spec)
            assert known is not None  # named_dir found it
            raise PhoenixError(f"model {spec!r} ({role}) is not here yet ({known.what}): run `{known.get}`")
        return named
    path = Path(spec).expanduser()
    if path.is_dir():
        return check_model_dir(path, spec, allow_pickle)
    if path.is_file() and is_gguf(path):
        return gguf_folder(path)  # dequantized once, then loaded as a folder
    if path.exists():
        raise PhoenixError(
            f"{spec!r} is a file, not a model directory or a GGUF: pass a directory holding config.json and weights"
        )
    if spec.count("/") == 1 and not spec.startswith((".", "/")):
        return check_model_dir(_from_hub_cache(spec), spec, allow_pickle)
    raise PhoenixError(
        f"model {spec!r} not found: pass {', '.join(repr(n) for n in NAMED)}, a local model directory, "
        "or a Hugging Face id already in the local cache"
    )


def _from_hub_cache(repo_id: str) -> Path:
    import os

    from huggingface_hub import snapshot_download

    try:
        # read at call time, so a cache set after start-up (or by a test) is honoured
        return Path(snapshot_download(repo_id, local_files_only=True, cache_dir=os.environ.get("HF_HUB_CACHE") or None))
    except Exception:
        raise PhoenixError(
            f"model {repo_id!r} is not in the local Hugging Face cache: run `hf download {repo_id}` "
            "on a machine with internet access (Phoenix never downloads at run time)"
        ) from None


def load_model(spec: str, role: str, device: str, dtype, allow_pickle: bool = False):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve(spec, role, allow_pickle)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, trust_remote_code=False, use_safetensors=not allow_pickle, output_loading_info=True
        )
        model, info = loaded
    except PhoenixError:
        raise
    except Exception as exc:  # transformers raises many types; the user needs one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PhoenixError(f"could not load {role} {spec!r}: {first}") from None
    check_weights(info.get("missing_keys") or [], model.config, role, spec)
    return model.to(device).eval(), tokenizer


def check_weights(missing, config, role: str, spec: str) -> None:
    """Every weight the architecture needs came from the files: transformers fills a missing one with random numbers
    and only warns, and a missing output layer of a model whose config says untied embeddings drafts garbage."""
    missing = sorted(missing)
    if not missing:
        return
    tied = bool(getattr(config.get_text_config(), "tie_word_embeddings", False))
    if any(k.endswith("lm_head.weight") for k in missing) and not tied:
        raise PhoenixError(
            f"{role} {spec!r}: config.json says untied embeddings (tie_word_embeddings false) but the weights hold no "
            "lm_head.weight, so the output layer would be random; set tie_word_embeddings true or re-export the model"
        )
    raise PhoenixError(
        f"{role} {spec!r}: the weights lack {len(missing)} tensor(s) the architecture needs "
        f"({', '.join(missing[:3])}); re-export the model"
    )


def _same_tokenizer(t_tok, d_tok, target_name: str, draft_name: str) -> None:
    """Speculation compares token ids: every token must have the same id on both sides (one line naming the first
    that does not), and both must end a turn with the same token."""
    t_vocab, d_vocab = t_tok.get_vocab(), d_tok.get_vocab()
    if t_vocab != d_vocab:
        odd = next((t for t in sorted(t_vocab) if d_vocab.get(t) != t_vocab[t]), None)
        odd = odd if odd is not None else next(t for t in sorted(d_vocab) if t not in t_vocab)
        raise PhoenixError(
            f"draft {draft_name!r} and target {target_name!r} have different tokenizers ({len(d_vocab):,} against "
            f"{len(t_vocab):,} tokens; {odd!r} is id {d_vocab.get(odd)} in the draft, {t_vocab.get(odd)} in the "
            "target); pick a draft from the target's family, or pass --draft none (model-free drafters)"
        )
    if t_tok.eos_token_id != d_tok.eos_token_id:
        raise PhoenixError(
            f"draft {draft_name!r} ends with token {d_tok.eos_token_id}, target {target_name!r} with "
            f"{t_tok.eos_token_id}; pick a draft from the target's family, or pass --draft none (model-free drafters)"
        )


def shared_vocab(t_tok, d_tok, target, draft, target_name: str, draft_name: str) -> int:
    """Speculation compares token ids, so both sides must mean the same thing by each id: the tokenizers must match.
    Families often pad the output layer differently (Qwen2.5-7B has 152,064 rows, -0.5B 151,936, one tokenizer); such
    a pair is fine as long as both cover every real token. Returns the rows the draft may propose from."""
    _same_tokenizer(t_tok, d_tok, target_name, draft_name)
    rows = min(target.get_output_embeddings().weight.shape[0], draft.get_output_embeddings().weight.shape[0])
    return _rows_cover(rows, len(t_tok), target_name, draft_name)


def _rows_cover(rows: int, tokens: int, target_name: str, draft_name: str) -> int:
    """The one rule, whether rows come from loaded weights or from config.json."""
    if rows < tokens:
        raise PhoenixError(
            f"the output layer of {draft_name!r} or {target_name!r} has {rows} rows but the tokenizer has "
            f"{tokens} tokens; re-export the model with its full vocabulary"
        )
    return rows


def config_rows(path: Path) -> int | None:
    """Output rows as config.json declares them (vocab_size), without loading weights."""
    try:
        cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    rows = cfg.get("vocab_size", (cfg.get("text_config") or {}).get("vocab_size"))
    return rows if isinstance(rows, int) and not isinstance(rows, bool) else None


def has_chat_template(folder: Path) -> bool:
    """A model folder whose tokenizer has a chat template (in tokenizer_config.json or chat_template.jinja), read
    without loading anything."""
    if (Path(folder) / "chat_template.jinja").is_file():
        return True
    try:
        config = json.loads((Path(folder) / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("chat_template"))


def check_same_tokenizer_files(target_path: Path, draft_path: Path, target_name: str, draft_name: str) -> None:
    """The pair checks of load_pair without loading weights, for the form and `submit`: the same tokenizer, and
    output layers (as config.json declares them) that cover every token."""
    try:
        _check_pair_files(target_path, draft_path, target_name, draft_name)
    except PhoenixError:
        raise
    except Exception as exc:
        raise PhoenixError(
            f"could not read the tokenizers of {target_name!r} / {draft_name!r}: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None


def _check_pair_files(target_path: Path, draft_path: Path, target_name: str, draft_name: str) -> None:
    from transformers import AutoTokenizer

    if is_head_dir(draft_path):  # an EAGLE-3 head ships no tokenizer: it must be shaped for the target
        _head_matches(
            json.loads((draft_path / "config.json").read_text(encoding="utf-8")),
            json.loads((target_path / "config.json").read_text(encoding="utf-8")),
            target_name,
            draft_name,
        )
        return
    t_tok = AutoTokenizer.from_pretrained(target_path, trust_remote_code=False)
    d_tok = AutoTokenizer.from_pretrained(draft_path, trust_remote_code=False)
    _same_tokenizer(t_tok, d_tok, target_name, draft_name)
    rows = [r for r in (config_rows(target_path), config_rows(draft_path)) if r is not None]
    if len(rows) == 2:
        _rows_cover(min(rows), len(t_tok), target_name, draft_name)


def prepare(pair: LoadedPair, pack: str = "auto", runner: str = "auto") -> LoadedPair:
    """What runs the pair's forwards: linear layers prepacked where measured faster (engine.decode.packed), and
    Phoenix's runner where the architecture allows (engine.decode.runner); both kept on the pair for the run."""
    pack_pair(pair, pack)
    try:
        use_runner(pair, runner)
    except ValueError as exc:
        raise PhoenixError(str(exc), field="runner") from None
    fuse_pair(pair)  # on the runner's layers: q, k, v and gate, up as one GEMM each
    calibrate_pair(pair)  # which GEMM takes a few-token forward of each weight, as measured on this CPU
    return pair


def load_pair(
    target: str = EMBEDDED,
    draft: str | None = EMBEDDED,
    device: str = "auto",
    dtype: str = "auto",
    allow_pickle: bool = False,
) -> LoadedPair:
    dev = pick_device(device)
    torch_dtype = pick_dtype(dtype, dev)
    t_model, t_tok = load_model(target, "target", dev, torch_dtype, allow_pickle)
    d_model, rows = None, None
    d_path = resolve(draft, "draft", allow_pickle) if draft else None
    if draft and d_path is not None and is_head_dir(d_path):
        d_model = load_head_for(d_path, t_model, target, draft, dev, torch_dtype)
    elif draft:
        d_model, d_tok = load_model(draft, "draft", dev, torch_dtype, allow_pickle)
        rows = shared_vocab(t_tok, d_tok, t_model, d_model, target, draft)
    dtype_name = str(torch_dtype).removeprefix("torch.")
    folders = (resolve(target, "target", allow_pickle), d_path)
    return LoadedPair(t_model, d_model, t_tok, target, draft, dev, dtype_name, rows, folders=folders)


def _text_config(cfg: dict) -> dict:
    return cfg.get("text_config") or cfg


def _head_matches(head: dict, target: dict, target_name: str, draft_name: str) -> tuple[int, ...]:
    """An EAGLE-3 head reads the target's hidden states and embedding and maps back into its vocabulary: widths,
    vocabulary and tap layers must fit this target. Returns the taps (the config's, or vLLM's default)."""
    t = _text_config(target)
    width, layers = t.get("hidden_size"), int(t.get("num_hidden_layers") or 0)
    if head.get("target_hidden_size", head.get("hidden_size")) != width or head.get("hidden_size") != width:
        raise PhoenixError(
            f"EAGLE-3 head {draft_name!r} was built for hidden size "
            f"{head.get('target_hidden_size', head.get('hidden_size'))}, "
            f"target {target_name!r} has {width}; pick the head made for this target"
        )
    if head.get("vocab_size") != t.get("vocab_size"):
        raise PhoenixError(
            f"EAGLE-3 head {draft_name!r} maps into a vocabulary of {head.get('vocab_size')} tokens, target "
            f"{target_name!r} has {t.get('vocab_size')}; pick the head made for this target"
        )
    eagle = head.get("eagle_config") or {}
    if not isinstance(eagle, dict):  # a string where an object belongs was a traceback; every other field a line
        raise PhoenixError(f"EAGLE-3 head {draft_name!r}: config.json's eagle_config must be an object, got {eagle!r}")
    taps = tuple(eagle.get("eagle_aux_hidden_state_layer_ids") or default_taps(layers))
    if len(taps) != 3 or not all(isinstance(i, int) and 0 <= i <= layers for i in taps):
        raise PhoenixError(
            f"EAGLE-3 head {draft_name!r} taps layers {list(taps)}; target {target_name!r} has {layers} "
            "layers; pick the head made for this target"
        )
    return taps


def load_head_for(path: Path, target, target_name: str, draft_name: str, device: str, dtype):
    """An EAGLE-3 head checked against the loaded target; its taps are set from the config or vLLM's default."""
    taps = _head_matches(
        json.loads((path / "config.json").read_text(encoding="utf-8")), target.config.to_dict(), target_name, draft_name
    )
    head = load_head(path, draft_name, dtype, device)
    head.config.taps = taps
    return head
