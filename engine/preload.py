"""The allocator vLLM preloads on the CPU, preloaded for Phoenix's own server too (issue 66).

vLLM's CPU backend wants tcmalloc (and Intel's OpenMP) in ``LD_PRELOAD``; Phoenix preloads them for the vLLM servers
it manages (engine.engines.vllm). Phoenix's server allocates per step as well (each pass's activations, masks and
index tensors), and glibc's malloc hands big blocks back to the kernel and faults them in again. `serve --preload
auto` (the default) restarts the process once with tcmalloc preloaded where the machine has it; nothing changes
what is computed, only where its memory comes from. The run records what was preloaded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TCMALLOC = (  # Debian's libtcmalloc-minimal4 (`.ci/run` installs it), per architecture
    "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
)
MARK = "PHOENIX_PRELOADED"  # set in the restarted process: it never restarts again, whatever it found
# tcmalloc reports every allocation over 1 GB on stderr; loading a model's weights is one
QUIET = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 40)}


def allocator() -> str | None:
    """tcmalloc's path where this machine has it."""
    return next((p for p in TCMALLOC if Path(p).is_file()), None)


def preloaded() -> str:
    """What this process runs with preloaded: the libraries' file names, "" for none."""
    return " ".join(Path(p).name for p in os.environ.get("LD_PRELOAD", "").replace(":", " ").split() if p)


def restart_with_allocator(mode: str, argv: list[str] | None = None) -> None:
    """Under ``auto``, replace this process with itself and tcmalloc preloaded (only in a process started as
    ``python -m engine``: a test calling the command in-process keeps its own; only once)."""
    if mode != "auto" or os.environ.get(MARK) or not _is_cli():
        return
    lib = allocator()
    if lib is None or lib in os.environ.get("LD_PRELOAD", ""):
        return
    env = dict(os.environ) | QUIET | {MARK: "1"}
    env["LD_PRELOAD"] = ":".join(p for p in (lib, os.environ.get("LD_PRELOAD", "")) if p)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "engine", *(argv if argv is not None else sys.argv[1:])], env)


def _is_cli() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", "") == "engine.__main__"
