"""Phoenix's Grafana dashboard as code: the panels vLLM's own dashboard has for speculative decoding, over the
worker's ``phoenix:`` metrics, plus tokens/sec by mode and arm.

``dashboard()`` builds the JSON that ``engine/observe/grafana-phoenix.json`` holds (a test keeps the two equal,
and another runs every expression through a real Prometheus). Import the file in Grafana and pick the Prometheus
data source that scrapes the worker's /metrics.
"""

from __future__ import annotations

import json
from pathlib import Path

FILE = Path(__file__).with_name("grafana-phoenix.json")
MODEL = 'model_name=~"$model_name"'
WINDOW = "$__rate_interval"


def _rate(metric: str, by: str = "", labels: str = MODEL) -> str:
    selector = f"{metric}{{{labels}}}" if labels else metric
    return f"sum{f' by ({by})' if by else ''}(rate({selector}[{WINDOW}]))"


def _quantiles(bucket: str) -> list[tuple[str, str]]:
    return [(f"histogram_quantile({q}, {_rate(bucket, 'le')})", f"p{int(q * 100)}") for q in (0.5, 0.95, 0.99)]


DRAFTS = _rate("phoenix:spec_decode_num_drafts_total")
# (title, unit, [(PromQL, legend)]) in vLLM's definitions: acceptance = accepted / draft tokens,
# mean acceptance length = 1 + accepted / drafts, position i = passes whose first i+1 drafts were accepted / drafts.
PANELS = [
    (
        "Draft acceptance rate",
        "percentunit",
        [
            (
                f"{_rate('phoenix:spec_decode_num_accepted_tokens_total')} / "
                f"{_rate('phoenix:spec_decode_num_draft_tokens_total')}",
                "accepted / drafted",
            )
        ],
    ),
    (
        "Mean acceptance length",
        "short",
        [
            (
                f"1 + {_rate('phoenix:spec_decode_num_accepted_tokens_total')} / {DRAFTS}",
                "mean acceptance length (1 + accepted / drafts, vLLM's)",
            )
        ],
    ),
    (
        "Acceptance by draft position",
        "percentunit",
        [
            (
                f"{_rate('phoenix:spec_decode_num_accepted_tokens_per_pos_total', 'position')} / scalar({DRAFTS})",
                "position {{position}}",
            )
        ],
    ),
    (
        "Tokens/sec by mode and arm (mean per request)",
        "short",
        [
            (
                f"{_rate('phoenix:request_tokens_per_second_sum', 'mode, arm', '')} / "
                f"{_rate('phoenix:request_tokens_per_second_count', 'mode, arm', '')}",
                "{{mode}} k={{arm}}",
            )
        ],
    ),
    (
        "Requests per second by mode and arm",
        "reqps",
        [(_rate("phoenix:requests_total", "mode, arm", ""), "{{mode}} k={{arm}}")],
    ),
    (
        "Requests running",
        "short",
        [
            (f"sum(phoenix:num_requests_running{{{MODEL}}})", "running"),
            (f"sum(phoenix:num_requests_waiting{{{MODEL}}})", "waiting"),
        ],
    ),
    ("KV-cache usage (the server)", "percentunit", [(f"max(phoenix:kv_cache_usage_perc{{{MODEL}}})", "used")]),
    ("Time to first token (the server)", "s", _quantiles("phoenix:time_to_first_token_seconds_bucket")),
    ("Time per output token (the server)", "s", _quantiles("phoenix:request_time_per_output_token_seconds_bucket")),
    ("Queue time (the server)", "s", _quantiles("phoenix:request_queue_time_seconds_bucket")),
]


def _panel(i: int, title: str, unit: str, targets: list[tuple[str, str]]) -> dict:
    return {
        "id": i + 1,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(65 + j), "expr": expr, "legendFormat": legend} for j, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard() -> dict:
    return {
        "title": "Phoenix speculative decoding",
        "uid": "phoenix-spec-decode",
        "schemaVersion": 39,
        "version": 1,
        "tags": ["phoenix", "speculative-decoding"],
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "10s",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"},
                {
                    "name": "model_name",
                    "type": "query",
                    "label": "Model",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": {"query": "label_values(phoenix:num_requests_running, model_name)", "refId": "models"},
                    "definition": "label_values(phoenix:num_requests_running, model_name)",
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                },
            ]
        },
        "panels": [_panel(i, *p) for i, p in enumerate(PANELS)],
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"
