"""Observability outside the decode loop: Sentry traces and Prometheus counters."""
