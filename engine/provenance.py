"""Where a figure was measured, read in one place: the CPU (model, family, core count, the instruction sets that
change a forward's cost), the library versions and the commit. Every run stores ``environment()``; `--fast` matches
a measurement to this machine by it; the llama.cpp helpers read the CPU's flags from here.

Light on purpose (no torch import): the dashboard, `submit` and the CLI's help read it.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from engine.paths import ROOT
from engine.preload import preloaded

VERSIONED = ("torch", "transformers", "sqlalchemy")
SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")  # what moves V(n)


def cpuinfo() -> str:
    """/proc/cpuinfo, or "" where there is none (not Linux) or it cannot be read."""
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def cpu_field(text: str, name: str) -> str:
    """The first value of ``name`` in a cpuinfo text ("" where it has none)."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return ""


def cpu_flags(text: str | None = None) -> list[str]:
    return cpu_field(cpuinfo() if text is None else text, "flags").split()


def native_bf16(text: str | None = None) -> bool:
    """The CPU multiplies bf16 in hardware (AVX512-BF16 or AMX): bf16 weights then halve what a decode step reads at
    no cost in arithmetic. Without it bf16 is emulated and fp32 is the faster path."""
    flags = cpu_flags(text)
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu(text: str | None = None) -> dict:
    """The CPU a run measured on (every speed figure names it: the same drafter pays on one and not another), its
    core count and the instruction sets that change the forward's cost."""
    text = cpuinfo() if text is None else text
    model = cpu_field(text, "model name")
    if model and cpu_field(text, "cpu family"):  # "AMD EPYC" names two generations: family and model tell them apart
        model = f"{model} (family {cpu_field(text, 'cpu family')}, model {cpu_field(text, 'model')})"
    flags = cpu_flags(text)
    return {
        "cpu": model or platform.processor() or None,
        "cores": os.cpu_count(),
        "cpu_flags": [f for f in SPEED_FLAGS if f in flags],
    }


def git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict:
    versions: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        **versions,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        **cpu(),
        **threads(),
        "preload": preloaded(),  # what LD_PRELOAD held (tcmalloc under `serve --preload auto`): "" for nothing
        "git_sha": git_sha(),
    }


def threads() -> dict:
    """torch's intra-op threads where torch is loaded (a fleet's replicas share the cores: the plan prices that)."""
    torch = sys.modules.get("torch")
    return {"threads": torch.get_num_threads()} if torch is not None else {}
