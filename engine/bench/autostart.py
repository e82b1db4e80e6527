"""Start one detached background worker for the dashboard, never two."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from engine.paths import DATA_DIR, ROOT


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        status = Path(f"/proc/{pid}/status").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError):
        return False
    zombie = any(line.startswith("State:") and "Z" in line.split()[1] for line in status.splitlines())
    return not zombie and "engine" in cmdline and "worker" in cmdline


def worker_pid(data_dir: Path) -> int | None:
    try:
        pid = int((data_dir / "worker.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def ensure_worker(db_url: str, data_dir: Path | None = None) -> str:
    """'disabled', 'running' or 'started'. The DB URL goes by environment, not argv,
    so a password in it never shows in a process list."""
    if os.environ.get("PHOENIX_AUTOSTART_WORKER", "1") == "0":
        return "disabled"
    data_dir = Path(data_dir or DATA_DIR)
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "worker.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two dashboard sessions must not both start one
        if worker_pid(data_dir) is not None:
            return "running"
        log = open(data_dir / "worker.log", "ab")
        env = {**os.environ, "PHOENIX_DB": db_url}
        proc = subprocess.Popen([sys.executable, "-m", "engine", "worker"], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        (data_dir / "worker.pid").write_text(str(proc.pid))
        return "started"
