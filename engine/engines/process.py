"""A server process Phoenix starts and stops: llama.cpp's llama-server and vLLM share this lifecycle.

One server per configuration: its pid (with the process's identity, so a reused pid is never signalled), log,
exact command line and settings live in data/<kind>-<key>.*, the way the worker's files do. `stop` finds it, a
second `launch` of the same configuration reuses it, and nothing is left running without a file that names it.
Phoenix only ever signals a process whose record it wrote: a server somebody else runs is left alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from engine.errors import PhoenixError
from engine.queue.autostart import identity, is_process, pid_record, write_pid

KINDS = ("llamacpp", "vllm")  # the file prefixes of the servers Phoenix manages


def files(kind: str, ident: dict, data_dir: Path) -> dict[str, Path]:
    """The server's files, keyed by what identifies a server (settings left at None are not part of the key, so a
    server started before such a setting existed is still found)."""
    key = hashlib.sha256(json.dumps({k: v for k, v in ident.items() if v is not None}, sort_keys=True).encode())
    return {ext: data_dir / f"{kind}-{key.hexdigest()[:12]}.{ext}" for ext in ("pid", "log", "json", "lock")}


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout_s) as resp:
            return resp.status == 200
    except OSError:
        return False


def running_pid(f: dict[str, Path]) -> int | None:
    """The pid of the server Phoenix started, if that very process still runs (pid and start time)."""
    record = pid_record(f["pid"])
    return record[0] if record is not None and is_process(*record) else None


def check_port_free(port: int, name: str) -> None:
    """One line, before a server is launched, where another program already listens on 127.0.0.1:``port``."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port a stopped server left in TIME_WAIT is free
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise PhoenixError(
                f"port {port} is taken by another program; {name} was not started: pass another --port"
            ) from None


def session_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) of every process in the session ``pid`` leads: a server Phoenix started and its
    children (vLLM's engine core), from /proc; None where there is no such process (or no /proc)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total, seen = 0, False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 13 and (fields[3] == str(pid) or stat.parent.name == str(pid)):
            total += int(fields[11]) + int(fields[12])  # utime, stime (the 14th and 15th fields of stat)
            seen = True
    return total / tick if seen else None


def log_tail(path: Path, lines: int = 400) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - (256 << 10)))  # the tail only: a log can be large
            return fh.read().decode("utf-8", "replace").splitlines()[-lines:]
    except OSError:
        return []


def launch(
    name: str,
    f: dict[str, Path],
    argv: list[str],
    url: str,
    config: dict,
    startup_s: float,
    why_exited: Callable[[int | None, list[str]], str],
    env: dict[str, str] | None = None,
) -> dict:
    """Start ``argv`` (or find it running), wait for ``url``/health; its url, pid, log and command line. A process
    that exits at start is one line from ``why_exited(returncode, log lines)``; one past ``startup_s`` is stopped."""
    pid = running_pid(f)
    if pid is not None:
        return {**json.loads(f["json"].read_text()), "state": "running"}
    if healthy(url):
        port = url.rsplit(":", 1)[-1]
        raise PhoenixError(f"port {port} already serves something Phoenix did not start; pass --port")
    start_at = f["log"].stat().st_size if f["log"].exists() else 0
    with open(f["log"], "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=None if env is None else {**os.environ, **env},
        )
    info = {"url": url, "pid": proc.pid, "identity": identity(proc.pid)}
    info |= {"log": str(f["log"]), "command": " ".join(argv), "config": config}
    write_pid(f["pid"], proc.pid)
    f["json"].write_text(json.dumps(info, indent=1))
    end = time.monotonic() + startup_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            lines = this_start(f["log"], start_at)
            forget(f)
            raise PhoenixError(f"{name} exited at start ({why_exited(proc.returncode, lines)}); its log is {f['log']}")
        if healthy(url):
            return {**info, "state": "started"}
        time.sleep(0.25)
    stop(f)
    raise PhoenixError(f"{name} did not answer /health within {startup_s:.0f} s; stopped; its log is {f['log']}")


def this_start(log: Path, offset: int) -> list[str]:
    """The log lines written since ``offset`` (a log is appended to by every start of one configuration)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            return fh.read()[-(256 << 10) :].decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def forget(f: dict[str, Path]) -> None:
    for ext in ("pid", "json"):
        f[ext].unlink(missing_ok=True)


def stop(f: dict[str, Path], wait_s: float = 20.0) -> bool:
    """SIGTERM the server Phoenix started, wait, SIGKILL its process group if it will not go; False when none was
    running. Only that very process is signalled: a stale pid file naming another process leaves it alone."""
    record = pid_record(f["pid"])
    if record is None or not is_process(*record):
        forget(f)
        return False
    pid, ident = record
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + wait_s
    while time.monotonic() < end and is_process(pid, ident):
        time.sleep(0.1)
    if is_process(pid, ident):
        _kill_group(pid)
    _reap_session(pid)
    forget(f)
    return True


def _kill_group(pid: int) -> None:
    """The server was started in a session of its own (start_new_session): its group holds its children (vLLM's
    engine core) and nothing else, so a server that ignored SIGTERM takes them with it."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _reap_session(sid: int) -> None:
    """Children the server left behind (vLLM's engine core) are still in the session it was started in, whose id
    is the server's pid: only processes Phoenix started carry it."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and fields[3] == str(sid) and int(stat.parent.name) != os.getpid():
            try:
                os.kill(int(stat.parent.name), signal.SIGKILL)
            except OSError:
                pass


def records(kind: str, data_dir: Path) -> list[dict]:
    """Every server record `launch` wrote for ``kind``; a record that is unreadable or not an object (a file
    holding ``[]``, say) is skipped, not a crash."""
    out = []
    for path in sorted(data_dir.glob(f"{kind}-*.json")) if data_dir.is_dir() else []:
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(info, dict) and isinstance(info.get("config"), dict):
            out.append(info)
    return out


def stop_all(kind: str, data_dir: Path, stop_one: Callable[[dict], bool]) -> list[dict]:
    """Every server of ``kind`` Phoenix left running, stopped through ``stop_one(settings)``; a record whose
    settings this version cannot name (another version's, or not Phoenix's) is skipped, not a crash."""
    stopped = []
    for info in records(kind, data_dir):
        try:
            if stop_one(info["config"]):
                stopped.append(info)
        except TypeError:
            continue
    return stopped


def command_at(url: str, data_dir: Path) -> str | None:
    """The command line of the managed server (of any kind) at ``url``, for the run's record; None for any other."""
    base = url.rstrip("/").removesuffix("/v1")
    for kind in KINDS:
        for info in records(kind, data_dir):
            pid = info.get("pid")
            if info.get("url") == base and isinstance(pid, int) and is_process(pid, info.get("identity")):
                return info.get("command")
    return None
