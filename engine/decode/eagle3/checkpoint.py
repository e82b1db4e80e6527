"""An EAGLE-3 head's folder, as vLLM and SGLang load it: config.json, model.safetensors, d2t offsets and t2d."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.decode.eagle3.head import Eagle3Head, HeadConfig
from engine.errors import PhoenixError

WEIGHTS = "model.safetensors"


def is_head_dir(path: Path) -> bool:
    try:
        cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return any("Eagle3" in str(a) for a in cfg.get("architectures") or [])


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


def load_head(path: Path, where: str, dtype: torch.dtype, device: str = "cpu") -> Eagle3Head:
    """Read a head folder; ``layers.0.*`` (some exporters' name for ``midlayer.*``) is accepted as well."""
    from safetensors.torch import load_file

    path = Path(path)
    try:
        c = HeadConfig.from_json(json.loads((path / "config.json").read_text(encoding="utf-8")), where)
    except (OSError, ValueError) as exc:
        raise PhoenixError(f"{where}: could not read config.json ({exc}); re-export the head") from None
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise PhoenixError(f"{where}: no *.safetensors weights; pass a complete EAGLE-3 head folder")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update({k.replace("layers.0.", "midlayer.", 1): v for k, v in load_file(str(f)).items()})
    state.pop("embed_tokens.weight", None)  # the target's embedding is used: Phoenix verifies with the target anyway
    head = Eagle3Head(c)
    if "d2t" not in state and c.draft_vocab_size == c.vocab_size:
        state["d2t"] = torch.zeros(c.draft_vocab_size, dtype=torch.long)
    if "t2d" not in state:
        state["t2d"] = _mask_from(state.get("d2t"), c.vocab_size)
    missing, unexpected = head.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.startswith("rotary")]
    if missing or unexpected:
        raise PhoenixError(
            f"{where}: weights do not match an EAGLE-3 head (missing {missing[:3]}, unexpected "
            f"{unexpected[:3]}); re-export it in the vLLM format"
        )
    return head.to(device=device, dtype=dtype).eval()


def _mask_from(d2t: torch.Tensor | None, vocab: int) -> torch.Tensor:
    mask = torch.zeros(vocab, dtype=torch.bool)
    if d2t is not None:
        mask[torch.arange(len(d2t)) + d2t] = True
    return mask


def vocab_maps(draft_to_target: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """d2t offsets and the t2d mask for a sorted list of target ids kept in the draft vocabulary."""
    ids = torch.as_tensor(draft_to_target, dtype=torch.long).sort().values
    return ids - torch.arange(len(ids)), _mask_from(ids - torch.arange(len(ids)), vocab_size)
