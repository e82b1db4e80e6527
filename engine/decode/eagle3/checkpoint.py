"""An EAGLE-3 head's folder, as vLLM and SGLang load it: config.json, model.safetensors, d2t offsets and t2d."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.catalog import is_head_dir  # noqa: F401  (the one test, re-exported where the loader reads it)
from engine.decode.eagle3.head import Eagle3Head, HeadConfig
from engine.errors import PhoenixError

WEIGHTS = "model.safetensors"


def save_head(head: Eagle3Head, path: Path, dtype: torch.dtype = torch.float16, card: dict | None = None) -> None:
    """config.json and model.safetensors as vLLM and SGLang read them (d2t and t2d keep their integer/bool types)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {
        name: (t.to(dtype) if t.is_floating_point() else t).detach().cpu().contiguous()
        for name, t in head.state_dict().items()
        if not name.startswith("rotary")
    }
    save_file(tensors, str(path / WEIGHTS), metadata={"format": "pt"})
    (path / "config.json").write_text(
        json.dumps(head.config.to_json(str(dtype).removeprefix("torch.")), indent=2) + "\n"
    )
    if card is not None:
        (path / "phoenix_card.json").write_text(json.dumps(card, indent=2) + "\n")


# Bounds far above any real head (Llama-3-70B's are 8,192 wide, 28,672 MLP, 128,256 tokens), so an absurd
# config.json is one line instead of a multi-terabyte allocation.
LIMITS = {
    "hidden_size": 1 << 16,
    "num_attention_heads": 1 << 10,
    "num_key_value_heads": 1 << 10,
    "intermediate_size": 1 << 18,
    "vocab_size": 1 << 21,
    "draft_vocab_size": 1 << 21,
    "target_hidden_size": 1 << 16,
}


def check_config(c: HeadConfig, where: str) -> None:
    """Every size a positive whole number within LIMITS, and the shapes consistent, before anything is allocated."""
    for name, top in LIMITS.items():
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise PhoenixError(f"{where}: config.json {name} = {value!r} is not a size in 1..{top}")
    if c.hidden_size % c.num_attention_heads or c.num_attention_heads % c.num_key_value_heads:
        raise PhoenixError(
            f"{where}: config.json heads do not divide: hidden_size {c.hidden_size}, num_attention_heads "
            f"{c.num_attention_heads}, num_key_value_heads {c.num_key_value_heads}"
        )
    if c.draft_vocab_size > c.vocab_size:
        raise PhoenixError(f"{where}: draft_vocab_size {c.draft_vocab_size} exceeds vocab_size {c.vocab_size}")


def _read_weights(path: Path, where: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise PhoenixError(f"{where}: no *.safetensors weights; pass a complete EAGLE-3 head folder")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        if not f.is_file():  # a FIFO or device named *.safetensors would block the read forever
            raise PhoenixError(f"{where}: {f.name} is not a regular file")
        try:
            state.update({k.replace("layers.0.", "midlayer.", 1): v for k, v in load_file(str(f)).items()})
        except Exception as exc:  # safetensors raises its own error type for a torn or foreign file
            raise PhoenixError(f"{where}: cannot read {f.name} ({str(exc)[:120]}); re-export the head") from None
    return state


def load_head(path: Path, where: str, dtype: torch.dtype, device: str = "cpu") -> Eagle3Head:
    """Read a head folder; ``layers.0.*`` (some exporters' name for ``midlayer.*``) is accepted as well. A head
    that could not draft (non-finite weights, a vocabulary map out of range or folding ids onto one token) is
    refused with one line instead of drafting at 0% without a word."""
    path = Path(path)
    try:
        c = HeadConfig.from_json(json.loads((path / "config.json").read_text(encoding="utf-8")), where)
    except (OSError, ValueError, TypeError) as exc:
        raise PhoenixError(f"{where}: could not read config.json ({exc}); re-export the head") from None
    check_config(c, where)
    state = _read_weights(path, where)
    state.pop("embed_tokens.weight", None)  # the target's embedding is used: Phoenix verifies with the target anyway
    if "d2t" not in state and c.draft_vocab_size == c.vocab_size:
        state["d2t"] = torch.zeros(c.draft_vocab_size, dtype=torch.long)
    if "d2t" in state:
        check_d2t(state["d2t"], c, where)
    bad = [k for k, t in state.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise PhoenixError(f"{where}: weights hold NaN or infinity ({', '.join(bad[:3])}): the head cannot draft")
    if "t2d" not in state:
        state["t2d"] = _mask_from(state.get("d2t"), c.vocab_size)
    head = Eagle3Head(c)
    try:
        missing, unexpected = head.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a tensor whose shape is not the config's
        raise PhoenixError(f"{where}: weights do not fit config.json ({str(exc).splitlines()[-1][:160]})") from None
    missing = [m for m in missing if not m.startswith("rotary")]
    if missing or unexpected:
        raise PhoenixError(
            f"{where}: weights do not match an EAGLE-3 head (missing {missing[:3]}, unexpected "
            f"{unexpected[:3]}); re-export it in the vLLM format"
        )
    return head.to(device=device, dtype=dtype).eval()


def check_d2t(d2t: torch.Tensor, c: HeadConfig, where: str) -> None:
    """d2t holds offsets: draft id i proposes target id i + d2t[i], each inside the vocabulary and all distinct."""
    if d2t.dim() != 1 or len(d2t) != c.draft_vocab_size or d2t.is_floating_point():
        raise PhoenixError(f"{where}: d2t must be {c.draft_vocab_size} integer offsets, got {tuple(d2t.shape)}")
    ids = torch.arange(len(d2t)) + d2t.long()
    if bool((ids < 0).any() or (ids >= c.vocab_size).any()):
        raise PhoenixError(f"{where}: d2t maps draft ids outside the target's {c.vocab_size} tokens")
    distinct = int(ids.unique().numel())
    if distinct < len(ids):
        raise PhoenixError(
            f"{where}: d2t folds {len(ids)} draft ids onto {distinct} target tokens: the head cannot draft"
        )


def _mask_from(d2t: torch.Tensor | None, vocab: int) -> torch.Tensor:
    mask = torch.zeros(vocab, dtype=torch.bool)
    if d2t is not None:
        mask[torch.arange(len(d2t)) + d2t] = True
    return mask


def vocab_maps(draft_to_target: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """d2t offsets and the t2d mask for a sorted list of target ids kept in the draft vocabulary."""
    ids = torch.as_tensor(draft_to_target, dtype=torch.long).sort().values
    return ids - torch.arange(len(ids)), _mask_from(ids - torch.arange(len(ids)), vocab_size)
