"""`serve`: Phoenix's own OpenAI-compatible server over a loaded pair (engine.serve.api), recorded as a live run."""

from __future__ import annotations

import logging
import math
import signal
import socket
import sys
import threading
import time

from engine.cli.options import add_db, add_sentry, open_store, start_telemetry
from engine.config import add_options, from_args
from engine.engines import replicas
from engine.engines.config import PlanConfig
from engine.engines.replicas import FleetConfig
from engine.errors import PhoenixError
from engine.preload import restart_with_allocator
from engine.serve.config import ServeConfig, check_serve

MOVED = {"sweep", "watch", "engines"}  # `serve <these>` was the serving-engine client before Phoenix served


def cmd_fleet_start(args) -> int:
    cfg = from_args(FleetConfig, args)
    record = replicas.start(cfg, say=lambda line: print(line, flush=True))
    print(f"fleet: {cfg.replicas} replicas behind vllm-router ({cfg.router}) at {record['url']}")
    print(f"stop it with `python -m engine fleet stop --port {cfg.port}`")
    return 0


def cmd_fleet_stop(args) -> int:
    stopped = replicas.stop(args.port)
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was still running'}")
    return 0


def cmd_fleet_plan(args) -> int:
    from engine.engines import planning  # lazy: SimPy and pandas load only for a plan

    cfg = from_args(planning.PlanConfig, args)
    store = open_store(args.db)
    table, best = planning.plan(store, cfg)
    print(table.round(2).to_string(index=False))
    if cfg.slo:
        print(
            f"cheapest within {cfg.slo} (at the median): {best.replicas} replica(s), {best.setting}, "
            f"{best.output_throughput:.1f} tok/s, TTFT p50 {best.ttft_ms_p50:.0f} ms, "
            f"TPOT p50 {best.tpot_ms_p50:.1f} ms"
            if best
            else f"no priced fleet meets {cfg.slo}: add replicas (--replicas) or relax the SLO"
        )
    if cfg.validate:
        check = planning.validation(store, cfg)
        print("\nthe plan against fleets measured here:")
        print(check.round(3).to_string(index=False))
        planning.record_validation(store, check, cfg.source)
        if not check.empty:
            print(
                f"largest error: throughput {check['tok/s error'].max():.0%}, TTFT p50 {check['TTFT error'].max():.0%}"
            )
    return 0


def add_commands(sub) -> None:
    f = sub.add_parser("fleet", help="Phoenix's servers as replicas behind vllm-router: start and stop them")
    fsub = f.add_subparsers(dest="fleet_command", required=True)
    fs = fsub.add_parser("start", help="start N replicas and vllm-router in front of them, on 127.0.0.1")
    add_options(fs, FleetConfig)
    fs.set_defaults(func=cmd_fleet_start)
    ft = fsub.add_parser("stop", help="stop exactly what `fleet start` on that port started")
    ft.add_argument("--port", type=int, default=FleetConfig.port, help="the router's port (default 8100)")
    ft.set_defaults(func=cmd_fleet_stop)
    fp = fsub.add_parser(
        "plan",
        help="the replica count and speculation setting that meet an SLO at a request rate, simulated from one "
        "replica's measured steps, with its error against fleets measured here",
    )
    add_options(fp, PlanConfig)
    add_db(fp)
    fp.set_defaults(func=cmd_fleet_plan)
    p = sub.add_parser(
        "serve",
        help="Phoenix's OpenAI-compatible server: continuous batching, one forward verifies every request's drafts, "
        "k tuned to the load; recorded as a live run",
    )
    add_options(p, ServeConfig)
    add_db(p)
    add_sentry(p)
    p.set_defaults(func=cmd_serve)


def moved(argv: list[str]) -> str | None:
    """The one line for a command that moved: `engines sweep|watch|engines` is `engines ...` now."""
    if len(argv) >= 2 and argv[0] == "serve" and argv[1] in MOVED:
        new = "side-by-side" if argv[1] == "engines" else argv[1]
        return f"`serve {argv[1]}` moved to `python -m engine engines {new}` (`serve` starts Phoenix's own server now)"
    return None


def check_port(host: str, port: int) -> None:
    """Bind before loading anything, so a taken port is one line, not a model load and a traceback later."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise PhoenixError(f"cannot serve on {host}:{port} ({exc.strerror}); pass another --port") from None


ANSWER_GRACE_S = 5.0  # past the deadline: how long the aborted requests' answers get to reach their clients


def graceful_timeout(deadline_s: float) -> int:
    """uvicorn's own graceful timeout: past Phoenix's deadline and the answers' grace, so uvicorn never cancels a
    request Phoenix is still ending (it once got max(1, int(deadline)), at or below the deadline)."""
    return math.ceil(deadline_s + ANSWER_GRACE_S) + 1


def shutdown(server, service, deadline_s: float):
    """The SIGTERM and Ctrl-C handler: the first stops taking requests and lets those in flight finish, for at most
    ``deadline_s``; past it, or at a second signal, every request still held ends ``aborted`` (recorded) and the
    server exits. The loop does the ending itself, between steps (a handler runs mid-step)."""
    log = logging.getLogger("phoenix.serve")
    signals = []

    def force(reason: str) -> None:
        """Every held request ends aborted, answered (an OpenAI error, a stream's error event and [DONE]) and
        recorded; only then is uvicorn told to stop waiting. Forcing it first cancelled the answers mid-flight: whole
        requests got a plain-text 500, streams ended without [DONE], rows said the client went away."""
        service.scheduler.end_all(reason)
        threading.Thread(target=exit_when_answered, daemon=True).start()

    def exit_when_answered() -> None:
        ends = time.monotonic() + ANSWER_GRACE_S
        while time.monotonic() < ends and (service.scheduler.load != (0, 0) or service.answering()):
            time.sleep(0.05)
        if service.scheduler.load != (0, 0) or service.answering():
            # Only an answer its client will not take gets cut. Forcing otherwise skipped uvicorn's lifespan
            # shutdown, and asyncio then cancelled the lifespan task: a CancelledError traceback in every log.
            server.force_exit = True

    def handle(_signum=None, _frame=None) -> None:
        signals.append(time.monotonic())
        if len(signals) == 1:
            log.info("stopping: requests in flight get up to %g s to finish (signal again to stop now)", deadline_s)
            server.should_exit = True
            timer = threading.Timer(deadline_s, force, [f"the shutdown deadline ({deadline_s:g} s) passed"])
            timer.daemon = True
            timer.start()
        else:
            log.info("a second signal: ending every request now")
            force("the server was stopped by a second signal")

    return handle


def cmd_serve(args) -> int:
    import uvicorn  # the server's own stack, off every other command's path

    from engine.decode.decoder import Decoder  # lazy: torch and transformers load only for a server
    from engine.decode.loading import load_pair, prepare, serving_dtype  # lazy: as above
    from engine.serve.api import make_app, ready_line  # lazy: FastAPI loads only for a server
    from engine.serve.service import Service  # lazy: torch loads only for a server

    cfg = check_serve(from_args(ServeConfig, args))
    restart_with_allocator(cfg.preload)  # before anything loads: the new process reads its flags again
    cfg.dtype = serving_dtype(cfg.dtype, cfg.device)  # type: ignore[assignment]  # the run stores what ran, not auto
    check_port(cfg.host, cfg.port)
    store = open_store(args.db)
    telemetry = start_telemetry(args)
    draft = None if cfg.drafter in ("none", "ngram", "suffix") and cfg.draft in (None, "none") else cfg.draft
    pair = load_pair(cfg.target, draft, cfg.device, cfg.dtype, cfg.allow_pickle)
    decoder = Decoder(prepare(pair, cfg.pack, cfg.runner))
    service = Service(cfg, decoder, store, telemetry=telemetry)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    service.start(loop_thread=False)
    server = uvicorn.Server(
        uvicorn.Config(
            make_app(service, manage=False),
            host=cfg.host,
            port=cfg.port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=graceful_timeout(cfg.shutdown_timeout_s),  # a half-sent body cannot hold the exit
        )
    )
    http = threading.Thread(target=server.run, name="phoenix-http", daemon=True)
    signal.signal(signal.SIGTERM, shutdown(server, service, cfg.shutdown_timeout_s))
    signal.signal(signal.SIGINT, signal.getsignal(signal.SIGTERM))
    http.start()

    def stop_when_http_ends() -> None:  # in flight answered: the loop drains what is left, then stops
        http.join()
        service.request_stop()

    threading.Thread(target=stop_when_http_ends, daemon=True).start()
    while not server.started and http.is_alive():
        time.sleep(0.05)
    if server.started:
        logging.getLogger("phoenix.serve").info(ready_line(service))
    service.run_loop()  # the main thread: where torch's forwards run fastest
    service.stop()
    return 0 if server.started else 1
