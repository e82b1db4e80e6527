"""Sentry: one transaction, aggregated phase spans and a structured log per request.

Off when no DSN is given (said once). A malformed DSN or an unreachable host fails
at start with one line, because a benchmark that silently sends nothing is lost.
The DSN itself is never printed, logged or stored.
"""

from __future__ import annotations

import os
import socket
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from engine.errors import PhoenixError


@dataclass
class SentryConfig:
    dsn: str | None = None  # PHOENIX_SENTRY_DSN; never shown anywhere
    environment: str = "local"  # PHOENIX_SENTRY_ENVIRONMENT
    release: str | None = None  # PHOENIX_SENTRY_RELEASE; defaults to the git sha
    traces_sample_rate: float = 1.0
    profiling: bool = True  # continuous profiling tied to traces
    acceptance_floor: float = 0.55  # warn when a run's acceptance falls below
    connect_timeout_s: float = 3.0

    @classmethod
    def from_env(cls, **overrides) -> SentryConfig:
        cfg = cls(
            dsn=os.environ.get("PHOENIX_SENTRY_DSN") or None,
            environment=os.environ.get("PHOENIX_SENTRY_ENVIRONMENT", "local"),
            release=os.environ.get("PHOENIX_SENTRY_RELEASE") or None,
            profiling=os.environ.get("PHOENIX_SENTRY_PROFILING", "1") != "0",
        )
        for key, value in overrides.items():
            if value is not None:
                setattr(cfg, key, value)
        return cfg


def check_dsn(dsn: str, timeout_s: float) -> tuple[str, int]:
    from sentry_sdk.utils import BadDsn, Dsn

    try:
        parsed = Dsn(dsn)
    except BadDsn:
        raise PhoenixError(
            "PHOENIX_SENTRY_DSN is malformed: copy it from Sentry (Settings > Client Keys), "
            "it looks like https://<key>@<host>/<project>"
        ) from None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.host, port), timeout=timeout_s).close()
    except OSError:
        raise PhoenixError(
            f"the Sentry host {parsed.host}:{port} cannot be reached: check the network or the DSN's "
            "host, or unset PHOENIX_SENTRY_DSN to run without Sentry"
        ) from None
    return parsed.host, port


class Telemetry:
    """Sentry, or a no-op when disabled. Everything here runs outside the decode loop."""

    def __init__(self, enabled: bool, cfg: SentryConfig):
        self.enabled, self.cfg = enabled, cfg

    @classmethod
    def off(cls) -> Telemetry:
        return cls(False, SentryConfig())

    @contextmanager
    def request(self, mode: str, k: int, run_id: int, target: str, draft: str | None, trace_id: str):
        if not self.enabled:
            yield None
            return
        import sentry_sdk

        txn = sentry_sdk.start_transaction(name=mode, op="phoenix.request", trace_id=trace_id)
        for key, value in {
            "arm": k,
            "mode": mode,
            "draft_model": draft or "none",
            "target_model": target,
            "run_id": run_id,
        }.items():
            txn.set_tag(key, str(value))
        with txn:
            yield txn

    def finish_request(self, txn, rec) -> None:
        """Phase spans laid out from the transaction's start and the measured sums, data and a structured log
        line. The times are stored split (prefill, draft prefill, draft passes, verify passes), so they tile."""
        if txn is None:
            return
        import sentry_sdk
        from sentry_sdk import logger as slog

        data = {
            "latency_seconds": rec.latency_s,
            "output_tokens": rec.output_tokens,
            "draft_proposed": rec.proposed,
            "draft_accepted": rec.accepted,
            "tokens_per_s": rec.tokens_per_s,
            "passes": rec.passes,
            "k": rec.k,
        }
        for key, value in data.items():
            txn.set_data(key, value)
        t = txn.start_timestamp
        phases = [
            ("prefill", "prefill", rec.prefill_s or 0.0),
            ("draft.prefill", "draft prefill", rec.draft_prefill_s or 0.0),
            ("draft", f"draft x{rec.passes} passes", rec.draft_s),
            ("verify", f"verify x{rec.passes} passes", rec.verify_s),
        ]
        for op, description, secs in phases:
            span = txn.start_child(op=op, name=description, start_timestamp=t)
            span.finish(end_timestamp=t + timedelta(seconds=secs))
            t += timedelta(seconds=secs)
        slog.info(
            "phoenix request {mode} arm={arm} {tokens_per_s} tok/s accepted {accepted}/{proposed}",
            mode=rec.mode,
            arm=rec.k,
            latency_seconds=rec.latency_s,
            tokens_per_s=round(rec.tokens_per_s, 3),
            accepted=rec.accepted,
            proposed=rec.proposed,
            run_id=rec.run_id,
            trace_id=rec.trace_id,
        )
        if rec.identical is False:
            with sentry_sdk.new_scope() as scope:
                scope.set_tag("run_id", str(rec.run_id))
                scope.set_tag("mode", rec.mode)
                scope.set_context("divergence", {"request_trace_id": rec.trace_id, "diverged_at": rec.diverged_at})
                sentry_sdk.capture_message(
                    f"output diverged from target-only at token {rec.diverged_at} ({rec.mode})", level="warning"
                )

    def bandit_decision(self, run_id: int, step) -> None:
        if not self.enabled:
            return
        from sentry_sdk import logger as slog

        slog.info(
            "phoenix bandit {policy} t={t} chose k={k} explored={explored}",
            policy=step.policy,
            t=step.t,
            k=step.chosen_k,
            explored=step.explored,
            fallback=step.fallback,
            epsilon=step.epsilon,
            arm_means=str(step.arm_means),
            run_id=run_id,
        )

    def policy_event(self, run_id: int, mode: str, event: str) -> None:
        """The safety fallback engaged or recovered: a warning people can alert on."""
        if not self.enabled:
            return
        import sentry_sdk

        with sentry_sdk.new_scope() as scope:
            scope.set_tag("run_id", str(run_id))
            scope.set_tag("mode", mode)
            text = (
                "speculation ran slower than target-only: falling back to k=0"
                if event == "fallback_engaged"
                else "speculation pays again: leaving the k=0 fallback"
            )
            sentry_sdk.capture_message(
                f"run {run_id} {mode}: {text}", level="warning" if event == "fallback_engaged" else "info"
            )

    def run_acceptance(self, run_id: int, accepted: int, proposed: int) -> None:
        if not self.enabled or not proposed:
            return
        rate = accepted / proposed
        if rate < self.cfg.acceptance_floor:
            import sentry_sdk

            with sentry_sdk.new_scope() as scope:
                scope.set_tag("run_id", str(run_id))
                sentry_sdk.capture_message(
                    f"run {run_id} acceptance {rate:.1%} is below the floor {self.cfg.acceptance_floor:.0%}",
                    level="warning",
                )

    def flush(self) -> None:
        if self.enabled:
            import sentry_sdk

            sentry_sdk.flush(timeout=5)

    def close(self) -> None:
        """Send what is queued and uninstall the SDK, so later code in this process sends nothing."""
        if self.enabled:
            import sentry_sdk

            sentry_sdk.get_client().close(timeout=2)
            sentry_sdk.init(dsn=None)
            self.enabled = False


_ANNOUNCED = False


def init(cfg: SentryConfig | None = None, release: str | None = None) -> Telemetry:
    global _ANNOUNCED
    cfg = cfg or SentryConfig.from_env()
    if not cfg.dsn:
        if not _ANNOUNCED:
            print("Sentry is off (no PHOENIX_SENTRY_DSN); trace ids are still recorded.", file=sys.stderr)
            _ANNOUNCED = True
        return Telemetry(False, cfg)
    check_dsn(cfg.dsn, cfg.connect_timeout_s)
    import sentry_sdk

    options: dict[str, Any] = dict(
        dsn=cfg.dsn,
        environment=cfg.environment,
        release=cfg.release or release,
        traces_sample_rate=cfg.traces_sample_rate,
        enable_logs=True,
        send_default_pii=False,
        default_integrations=False,
    )
    if cfg.profiling:
        options.update(profile_session_sample_rate=1.0, profile_lifecycle="trace")
    sentry_sdk.init(**options)
    if not _ANNOUNCED:
        print(f"Sentry is on (environment {cfg.environment}).", file=sys.stderr)
        _ANNOUNCED = True
    return Telemetry(True, cfg)
