"""A Prometheus scrape of a serving engine's /metrics (vLLM's ``vllm:spec_decode_*``, SGLang's, llama.cpp's), read by
the one parser `engines watch` uses (engine.engines.counters.parse_metrics): its spec-decode counters since the server
started become one interval of a watch run, so a GPU server's per-position acceptance (accepted at position i over
drafts, vLLM's unconditional meaning) sits on the same page as a live watch here. Text, not JSON: ``matches`` reads
the text."""

from __future__ import annotations

from dataclasses import dataclass

from db.entities import WatchInterval
from engine.engines.counters import SpecCounters, parse_metrics
from engine.errors import PhoenixError

TOOL = "Prometheus scrape"


@dataclass
class Scrape:
    counters: SpecCounters
    model: str  # the model_name label where the server set one


def matches(text: str) -> bool:
    """A /metrics body: Prometheus text that carries an engine's spec-decode counters."""
    return "spec_decode_num_drafts" in text and not text.lstrip().startswith(("{", "["))


def parse(text: str, where: str) -> Scrape:
    try:
        counters = parse_metrics(text)
    except PhoenixError as exc:
        raise PhoenixError(f"{where}: {str(exc).replace('/metrics', 'the scrape')}") from None
    if not counters.seen or counters.engine is None:
        raise PhoenixError(f"{where}: no spec-decode counters (vllm:spec_decode_num_drafts and its kin) in the scrape")
    if counters.drafts <= 0:
        raise PhoenixError(f"{where}: the server drafted nothing yet (spec_decode_num_drafts is 0): nothing to import")
    return Scrape(counters, _model(text))


def _model(text: str) -> str:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("model_name"):
                return str(s.labels["model_name"])[:200]
    return ""


def interval(c: SpecCounters) -> WatchInterval:
    """The counters since the server started, as one interval (its length unknown: 0 s, so no rate is made up)."""
    return WatchInterval(
        seq=0,
        seconds=0.0,
        drafts=int(round(c.drafts)),
        draft_tokens=int(round(c.draft_tokens)),
        accepted=int(round(c.accepted)),
        generation_tokens=int(round(c.generation_tokens)),
        per_position=[int(round(v)) for _, v in sorted(c.per_pos.items())],
    )
