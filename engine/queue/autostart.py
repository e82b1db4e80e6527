"""Start one detached background worker per database for the dashboard, never two for the same one."""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from engine.paths import DATA_DIR, ROOT

WORKER = ("engine", "worker")  # words of a Phoenix worker's command line


def pid_alive(pid: int, *words: str) -> bool:
    """Whether ``pid`` is a live (not zombie) process on this host; with ``words``, one whose command line holds
    each of them (a pid file can outlive its process and the pid be reused). Without them any live process counts,
    the cautious answer before taking over a run."""
    try:
        os.kill(pid, 0)
        status = Path(f"/proc/{pid}/status").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except PermissionError:
        return True  # it exists and belongs to someone else: never treat it as gone
    except (OSError, ValueError):
        return False
    zombie = any(line.startswith("State:") and "Z" in line.split()[1] for line in status.splitlines())
    return not zombie and all(word in cmdline for word in words)


def identity(pid: int) -> str | None:
    """A process as more than its pid: this boot's id and the clock tick it started at (/proc/<pid>/stat, field
    22), which a reused pid never repeats. None where the process is gone (or /proc is unreadable)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command name, which may hold spaces and parentheses
    return f"{boot}:{fields[19]}" if len(fields) > 19 else None


def is_process(pid: int, recorded: str | None) -> bool:
    """Whether ``pid`` is alive and is the very process whose identity() was recorded when Phoenix started it:
    a stale pid file never names somebody else's process (their server, a `tail -f` of its log)."""
    return bool(recorded) and pid > 0 and pid_alive(pid) and identity(pid) == recorded


def pid_record(path: Path) -> tuple[int, str | None] | None:
    """A pid file as Phoenix writes it, "<pid> <identity>"; None where it is missing or unreadable."""
    try:
        pid, _, ident = path.read_text().strip().partition(" ")
        return int(pid), ident or None
    except (OSError, ValueError):
        return None


def write_pid(path: Path, pid: int) -> None:
    path.write_text(f"{pid} {identity(pid) or ''}".strip())


def worker_alive_here(worker_id: str) -> bool:
    """A run's worker id is host:pid; True when that host is this one and the process still lives."""
    host, _, pid = (worker_id or "").rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and pid_alive(int(pid))


def worker_files(data_dir: Path, db_url: str) -> dict[str, Path]:
    """Pid, lock and log files of the worker that serves ``db_url``: one set per database, so a second
    database gets a worker of its own instead of a 'running' answer from the first one's."""
    key = hashlib.sha256(db_url.encode()).hexdigest()[:12]
    return {kind: data_dir / f"worker-{key}.{kind}" for kind in ("pid", "lock", "log")}


def registry(data_dir: Path, db_url: str) -> Path:
    """One empty file per live worker of ``db_url`` on this host, named by its pid: how `worker --stop` and the
    dashboard find every worker, autostarted or started by hand."""
    key = hashlib.sha256(db_url.encode()).hexdigest()[:12]
    return data_dir / f"workers-{key}"


def register(data_dir: Path, db_url: str, pid: int) -> Path:
    """The worker's entry, named by its pid and holding its identity (a pid alone is not one)."""
    folder = registry(data_dir, db_url)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(pid)).write_text(identity(pid) or "")
    return folder / str(pid)


def live_workers(db_url: str, data_dir: Path | None = None) -> list[int]:
    """Pids of the workers serving ``db_url`` on this host; files of workers that died without a word are swept."""
    folder = registry(Path(data_dir or DATA_DIR), db_url)
    pids = []
    for entry in sorted(folder.glob("*")) if folder.is_dir() else []:
        try:
            recorded = entry.read_text().strip()
        except OSError:
            recorded = ""
        if entry.name.isdigit() and is_process(int(entry.name), recorded):
            pids.append(int(entry.name))
        else:
            entry.unlink(missing_ok=True)
    return pids


def stop_workers(db_url: str, data_dir: Path | None = None, wait_s: float = 30.0) -> list[tuple[int, bool]]:
    """SIGTERM to every worker of ``db_url`` on this host, then wait: an idle worker exits at once, a busy one
    stops its run as Ctrl-C would (rows kept, run interrupted and resumable). (pid, stopped in time) per worker."""
    folder = registry(Path(data_dir or DATA_DIR), db_url)
    ids = {pid: (folder / str(pid)).read_text().strip() for pid in live_workers(db_url, data_dir)}
    for pid in ids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(is_process(p, i) for p, i in ids.items()):
        time.sleep(0.1)
    return [(p, not is_process(p, i)) for p, i in ids.items()]


def worker_pid(data_dir: Path, db_url: str) -> int | None:
    record = pid_record(worker_files(data_dir, db_url)["pid"])
    return record[0] if record is not None and is_process(*record) else None


def ensure_worker(db_url: str, data_dir: Path | None = None) -> tuple[str, Path]:
    """('disabled' | 'running' | 'started', the worker's log file). The DB URL goes by environment, not argv,
    so a password in it never shows in a process list."""
    data_dir = Path(data_dir or DATA_DIR)
    files = worker_files(data_dir, db_url)
    if os.environ.get("PHOENIX_AUTOSTART_WORKER", "1") == "0":
        return "disabled", files["log"]
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(files["lock"], "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two dashboard sessions must not both start one
        if worker_pid(data_dir, db_url) is not None:
            return "running", files["log"]
        log = open(files["log"], "ab")
        env = {**os.environ, "PHOENIX_DB": db_url}
        # --parent-pid: the worker leaves once idle after this dashboard exits, instead of living on under PID 1
        command = [sys.executable, "-m", "engine", "worker", "--parent-pid", str(os.getpid())]
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        write_pid(files["pid"], proc.pid)
        # until the child has exec'd, /proc shows our own command line and a second call would start another
        for _ in range(100):
            if proc.poll() is not None or pid_alive(proc.pid, *WORKER):
                break
            time.sleep(0.02)
        return "started", files["log"]
