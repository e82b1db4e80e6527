"""`fleet start|stop`: N of Phoenix's servers as replicas behind `vllm-router` (the Rust router on PyPI), on this
machine, as a serving team runs replicas behind the router the field runs.

Each replica is `python -m engine serve` on a port of its own, publishing the model-server protocol under the names
a router or an endpoint picker reads (`--metrics-prefix vllm`), its torch threads a share of the cores, and its
own live run in the one database, named for the fleet and the replica, so each request's record names the replica
that served it. The router takes the replicas' URLs and a policy (cache_aware, power_of_two, round_robin). Every
process is started through the one lifecycle Phoenix's managed servers share (engine.engines.process: pid, log and
command line in data/), and `fleet stop` stops exactly the processes its `start` wrote down, nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from engine.engines import process
from engine.engines.protocol import server_health
from engine.errors import PhoenixError
from engine.modes import DEFAULT_MAX_BATCH
from engine.paths import DATA_DIR

Policy = Literal["cache_aware", "power_of_two", "round_robin"]
ROUTER = "vllm-router"  # PyPI vllm-router 0.1.17 (requirements-engines.txt)


@dataclass
class FleetConfig:
    replicas: int = 2  # Phoenix servers behind the router
    router: Policy = "cache_aware"  # vllm-router's policy: cache_aware | power_of_two | round_robin
    port: int = 8100  # the router's, on 127.0.0.1; the replicas take the ports after it
    target: str = "embedded"  # what every replica serves (a name, a folder or a GGUF)
    draft: str = "embedded"  # each replica's draft or head ('none': model-free drafters only)
    drafter: str = "auto"  # each replica's --drafter
    dtype: str = "auto"
    max_batch: int = DEFAULT_MAX_BATCH  # each replica's --max-batch
    prefix_cache_gb: float = 0.5  # each replica's prefix cache (what cache_aware routing can make the most of)
    db: str = ""  # the one database every replica records into (default: Phoenix's data/phoenix.db)
    name: str = ""  # the fleet's name in its replicas' run names (default: fleet-<router port>)
    startup_s: float = 600.0  # how long a replica (load, warm, profile) or the router may take to answer /health

    def validate(self) -> FleetConfig:
        if not 1 <= self.replicas <= 16:
            raise PhoenixError(f"--replicas must be in 1..16, got {self.replicas}", field="replicas")
        if not 1 <= self.port <= 65535 - self.replicas:
            raise PhoenixError(
                f"--port must be in 1..{65535 - self.replicas} (the router's port, with {self.replicas} replica "
                f"port(s) after it), got {self.port}",
                field="port",
            )
        if self.router not in ("cache_aware", "power_of_two", "round_robin"):
            raise PhoenixError(f"--router must be cache_aware, power_of_two or round_robin, got {self.router!r}")
        return self


def router_binary() -> Path:
    """vllm-router as pip installed it beside this Python, else on PATH; one line naming the install otherwise."""
    beside = Path(sys.executable).parent / ROUTER
    found = beside if beside.is_file() else (Path(w) if (w := shutil.which(ROUTER)) else None)
    if found is None:
        raise PhoenixError(f"{ROUTER} is not installed: run `.venv/bin/pip install -r requirements-engines.txt`")
    return found


def threads_each(replicas: int) -> int:
    """Each replica's torch threads: the cores shared out (two replicas on two cores: one each)."""
    return max(1, (os.cpu_count() or 1) // replicas)


def replica_argv(cfg: FleetConfig, i: int) -> list[str]:
    argv = [sys.executable, "-m", "engine", "serve", "--host", "127.0.0.1", "--port", str(cfg.port + 1 + i)]
    argv += ["--target", cfg.target, "--draft", cfg.draft, "--drafter", cfg.drafter, "--dtype", cfg.dtype]
    argv += ["--max-batch", str(cfg.max_batch), "--prefix-cache-gb", str(cfg.prefix_cache_gb)]
    name = cfg.name or f"fleet-{cfg.port}"
    argv += ["--metrics-prefix", "vllm", "--name", f"{name} replica {i}", "--fleet", name]
    argv += ["--router", f"{cfg.router}@http://127.0.0.1:{cfg.port}"]
    return argv + (["--db", cfg.db] if cfg.db else [])


def router_argv(cfg: FleetConfig, metrics_port: int = 0) -> list[str]:
    """vllm-router's command; its Prometheus exporter on ``metrics_port`` (a free one `start` picks: left to its
    fixed default, 29000, a second router on the machine died at start)."""
    urls = [f"http://127.0.0.1:{cfg.port + 1 + i}" for i in range(cfg.replicas)]
    argv = [str(router_binary()), "--host", "127.0.0.1", "--port", str(cfg.port), "--policy", cfg.router]
    argv += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port or free_port())]
    return argv + ["--worker-urls", *urls, "--log-level", "warning"]


def free_port() -> int:
    """A port nothing listens on now, on 127.0.0.1 (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def record_file(port: int, data_dir: Path) -> Path:
    return data_dir / f"fleet-{port}.json"


def start(cfg: FleetConfig, data_dir: Path = DATA_DIR, say=print) -> dict:
    """Every replica, then the router, each waited for; what was started (also written to data/fleet-<port>.json,
    which `stop` reads). A replica that does not come up stops the ones started before it."""
    cfg.validate()
    data_dir.mkdir(parents=True, exist_ok=True)
    if record_file(cfg.port, data_dir).exists():
        raise PhoenixError(f"a fleet on port {cfg.port} is already running: `python -m engine fleet stop --port ...`")
    for port in range(cfg.port, cfg.port + cfg.replicas + 1):
        process.check_port_free(port, "the fleet")
    router_argv(cfg)  # the router is installed, or one line before any replica loads a model
    started: list[dict] = []
    env = {"OMP_NUM_THREADS": str(threads_each(cfg.replicas))}
    record: dict = {"config": asdict(cfg), "processes": started, "url": f"http://127.0.0.1:{cfg.port}/v1"}
    keep = lambda: record_file(cfg.port, data_dir).write_text(json.dumps(record, indent=1))  # noqa: E731
    keep()  # before the first launch, and after each: a stop always finds what was started
    main = threading.current_thread() is threading.main_thread()  # signal handlers belong to the main thread
    previous = signal.signal(signal.SIGTERM, _as_interrupt) if main else None  # timeout, CI, systemd: as Ctrl-C
    try:
        for i in range(cfg.replicas):
            say(f"replica {i}: starting on port {cfg.port + 1 + i} ({env['OMP_NUM_THREADS']} thread(s))")
            started.append(_launch(f"replica {i}", replica_argv(cfg, i), cfg.port + 1 + i, cfg, data_dir, env))
            started[-1]["run_id"] = _run_of(cfg.port + 1 + i)  # its live run: `stop` closes it if it died
            keep()
        metrics = free_port()
        say(f"router: {cfg.router} on port {cfg.port}, its Prometheus metrics on port {metrics}")
        started.append(_launch("vllm-router", router_argv(cfg, metrics), cfg.port, cfg, data_dir, {}))
        record["router_metrics_port"] = metrics
        keep()
    except BaseException:
        for info in reversed(started):
            process.stop(_files(info["key"], data_dir))
        record_file(cfg.port, data_dir).unlink(missing_ok=True)
        raise
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
    return record


def _as_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _files(key: dict, data_dir: Path) -> dict[str, Path]:
    return process.files("fleet", key, data_dir)


def _launch(name: str, argv: list[str], port: int, cfg: FleetConfig, data_dir: Path, env: dict) -> dict:
    key = {"fleet": cfg.port, "port": port}
    info = process.launch(
        name,
        _files(key, data_dir),
        argv,
        f"http://127.0.0.1:{port}",
        asdict(cfg),
        cfg.startup_s,
        lambda code, lines: next((ln.strip()[:240] for ln in reversed(lines) if ln.strip()), f"exit status {code}"),
        env,
    )
    return {"name": name, "key": key, "pid": info.get("pid"), "command": info.get("command"), "log": info.get("log")}


def stop(port: int, data_dir: Path = DATA_DIR) -> list[str]:
    """Stop what `start` on ``port`` started (router first, so no request reaches a stopping replica); the names
    stopped. Only processes the record names, and only while their pid still names the process started."""
    path = record_file(port, data_dir)
    try:
        record = json.loads(path.read_text())
        processes = [p for p in record["processes"] if isinstance(p, dict) and isinstance(p.get("key"), dict)]
    except (OSError, ValueError, KeyError, TypeError):
        raise PhoenixError(f"no fleet was started on port {port} (no readable {path})") from None
    stopped: list[str] = []
    gone: list[str] = []
    for p in reversed(processes):
        if process.stop(_files(p["key"], data_dir)):
            stopped.append(p["name"])
        else:  # a router or replica that died says so; a replica's run, left "running" by a kill, is closed
            gone.append(f"{p['name']} (had already stopped{_close_run(record, p)})")
    path.unlink(missing_ok=True)
    return stopped + gone


def _run_of(port: int) -> int | None:
    """A replica's own live run, from its /health (None where it does not say)."""
    try:
        run_id = server_health(f"http://127.0.0.1:{port}", 10.0).get("run_id")
    except Exception:  # a replica that answered /health once and not now: its run is found no other way
        return None
    return run_id if isinstance(run_id, int) and not isinstance(run_id, bool) else None


def _close_run(record: dict, p: dict) -> str:
    """Mark a dead replica's run interrupted (only one still "running": a finished run keeps its status)."""
    run_id = p.get("run_id")
    if not isinstance(run_id, int):
        return ""
    from db.store import Store, resolve_url  # lazy: a stop with no run to close opens no database

    store = Store(resolve_url(str((record.get("config") or {}).get("db") or "") or None))
    reason = "its process had exited before `fleet stop` (killed or crashed); what it recorded is kept"
    return f"; its run #{run_id} marked interrupted" if store.interrupt_if_running(run_id, reason) else ""
