"""Observability outside the decode loop: Sentry traces (`sentry`), Prometheus counters in vLLM's shape (`prometheus`),
the Grafana dashboard as code (`grafana`).
"""
