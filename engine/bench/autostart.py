"""Start one detached background worker per database for the dashboard, never two for the same one."""
from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from engine.paths import DATA_DIR, ROOT


def pid_alive(pid: int, command: str | None = None) -> bool:
    """Whether ``pid`` is a live (not zombie) process on this host; with ``command``, a Phoenix process running that
    command (a pid file can outlive its worker and the pid be reused). Without it any live process counts, the
    cautious answer before taking over a run."""
    try:
        os.kill(pid, 0)
        status = Path(f"/proc/{pid}/status").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except PermissionError:
        return True  # it exists and belongs to someone else: never treat it as gone
    except (OSError, ValueError):
        return False
    zombie = any(line.startswith("State:") and "Z" in line.split()[1] for line in status.splitlines())
    return not zombie and (command is None or ("engine" in cmdline and command in cmdline))


def worker_alive_here(worker_id: str) -> bool:
    """A run's worker id is host:pid; True when that host is this one and the process still lives."""
    host, _, pid = (worker_id or "").rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and pid_alive(int(pid))


def worker_files(data_dir: Path, db_url: str) -> dict[str, Path]:
    """Pid, lock and log files of the worker that serves ``db_url``: one set per database, so a second
    database gets a worker of its own instead of a 'running' answer from the first one's."""
    key = hashlib.sha256(db_url.encode()).hexdigest()[:12]
    return {kind: data_dir / f"worker-{key}.{kind}" for kind in ("pid", "lock", "log")}


def worker_pid(data_dir: Path, db_url: str) -> int | None:
    try:
        pid = int(worker_files(data_dir, db_url)["pid"].read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid, "worker") else None


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
        proc = subprocess.Popen([sys.executable, "-m", "engine", "worker"], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        files["pid"].write_text(str(proc.pid))
        # until the child has exec'd, /proc shows our own command line and a second call would start another
        for _ in range(100):
            if proc.poll() is not None or pid_alive(proc.pid, "worker"):
                break
            time.sleep(0.02)
        return "started", files["log"]
