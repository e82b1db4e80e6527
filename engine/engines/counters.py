"""The counters every serving engine exports, read one way.

vLLM (``vllm:``, ``ray_vllm:`` under Ray Serve) and llama.cpp (``llamacpp:``) export the same counters with vLLM's
meanings, scraped before and after each measurement:
  acceptance rate      = accepted / draft_tokens
  mean accept length   = 1 + accepted / drafts
  per position i       = accepted_per_pos[i] / drafts   (unconditional)
SGLang (``sglang:``) exports acceptance as gauges over its last logging window (``spec_accept_rate``,
``spec_accept_length``), which cannot be differenced: a level reports the gauges as they stand at its end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from engine.errors import PhoenixError
from engine.measure import Measured, mean_acceptance_length
from engine.modes import SERVING_ENGINES

SPEC = "spec_decode_"
RAY_PREFIX = "ray_"  # vLLM under Ray Serve exports the same metrics as ray_vllm:...
GENERATED = {"generation_tokens", "tokens_predicted"}  # vLLM and SGLang's name, llama.cpp's


@dataclass
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)
    generation_tokens: float = 0.0
    seen: bool = False  # the body held spec-decode counters (or SGLang's gauges) at all
    reset: bool = False  # a counter went down since the previous scrape: the server restarted
    engine: str | None = None  # the prefix the metrics carried: vllm, sglang or llamacpp
    gauge_rate: float | None = None  # SGLang: spec_accept_rate over its last window
    gauge_length: float | None = None  # SGLang: spec_accept_length over its last window

    def minus(self, other: SpecCounters) -> SpecCounters:
        """The increase since ``other``. A counter that went down means a restart; as Prometheus's rate() does,
        the increase is then the new value itself, and the delta says so. Gauges keep their latest value."""
        pairs = [
            (self.drafts, other.drafts),
            (self.draft_tokens, other.draft_tokens),
            (self.accepted, other.accepted),
            (self.generation_tokens, other.generation_tokens),
        ] + [(v, other.per_pos.get(p, 0.0)) for p, v in self.per_pos.items()]
        latest = replace(self, engine=self.engine or other.engine)  # gauges keep their latest values
        if any(now < before for now, before in pairs):
            return replace(latest, per_pos=dict(self.per_pos), reset=True)
        return replace(
            latest,
            drafts=self.drafts - other.drafts,
            draft_tokens=self.draft_tokens - other.draft_tokens,
            accepted=self.accepted - other.accepted,
            per_pos={p: v - other.per_pos.get(p, 0.0) for p, v in self.per_pos.items()},
            generation_tokens=self.generation_tokens - other.generation_tokens,
            reset=False,
        )

    def summary(self) -> dict:
        n = max(self.per_pos, default=-1) + 1
        counted = self.draft_tokens > 0 or self.drafts > 0
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted": self.accepted,
            "acceptance": self.accepted / self.draft_tokens
            if self.draft_tokens
            else (None if counted else self.gauge_rate),
            "mean_acceptance_length": mean_acceptance_length(self.accepted, self.drafts)
            if self.drafts
            else (None if counted else self.gauge_length),
            "per_position": [self.per_pos.get(i, 0.0) / self.drafts if self.drafts else None for i in range(n)],
            "per_position_accepted": [self.per_pos.get(i, 0.0) for i in range(n)],
            "generation_tokens": self.generation_tokens,
            "spec_decode_counters": self.seen,
            "counters_reset": self.reset,
            "engine": self.engine,
            "acceptance_from": "gauges" if self.gauge_rate is not None and not counted else "counters",
        }


def split_name(sample_name: str) -> tuple[str | None, str]:
    """('vllm' | 'sglang' | 'llamacpp' | None, the name after the prefix, without _total)."""
    name = sample_name.removesuffix("_total").removeprefix(RAY_PREFIX)
    prefix, sep, rest = name.partition(":")
    return (prefix, rest) if sep and prefix in SERVING_ENGINES else (None, name)


MAX_POSITION = 1024  # no engine drafts further ahead; a larger label is a hostile or broken server


def parse_metrics(body: str) -> SpecCounters:
    """Sum the spec-decode counters of whichever engine wrote ``body`` over every label set (engines, models)."""
    from prometheus_client.parser import text_string_to_metric_families

    c = SpecCounters()
    try:
        samples = [s for family in text_string_to_metric_families(body) for s in family.samples]
    except (ValueError, TypeError, IndexError) as exc:
        raise PhoenixError(f"/metrics is not Prometheus text ({str(exc)[:80]}): is this the serving engine?") from None
    for s in samples:
        engine, name = split_name(s.name)
        if engine is None:
            continue
        counted = name.startswith(SPEC) or name in GENERATED  # other series (gauges, histograms) are not read
        if counted and (not math.isfinite(s.value) or s.value < 0):
            raise PhoenixError(f"/metrics: {s.name} is {s.value}, not a count: refusing the server's counters")
        c.engine = c.engine or engine
        if name.startswith(SPEC) or name in ("spec_accept_rate", "spec_accept_length"):
            c.seen = True
        if name == SPEC + "num_drafts":
            c.drafts += s.value
        elif name == SPEC + "num_draft_tokens":
            c.draft_tokens += s.value
        elif name == SPEC + "num_accepted_tokens":
            c.accepted += s.value
        elif name == SPEC + "num_accepted_tokens_per_pos":
            label = s.labels.get("position", "")
            if not (label.isascii() and label.isdigit() and int(label) < MAX_POSITION):
                raise PhoenixError(
                    f"/metrics: a draft position {label[:20]!r}, not a whole number below {MAX_POSITION}"
                )
            pos = int(label)
            c.per_pos[pos] = c.per_pos.get(pos, 0.0) + s.value
        elif name in GENERATED:
            c.generation_tokens += s.value
        elif name == "spec_accept_rate":
            c.gauge_rate = s.value
        elif name == "spec_accept_length":
            c.gauge_length = s.value
    return c


def level_notes(level: dict) -> list[str]:
    """What a level's numbers cannot show by themselves."""
    notes = []
    if not level.get("spec_decode_counters", True):
        notes.append(
            "the server exposes no spec-decode counters (vLLM without --speculative-config, llama.cpp "
            "without --spec-type or --metrics?); acceptance is unknown, not zero"
        )
    if level.get("acceptance_from") == "gauges":
        notes.append(
            "SGLang reports acceptance as gauges over its last logging window, not counters: this level's "
            "acceptance is the gauge at its end, and there is no per-position curve"
        )
    if level.get("counters_reset"):
        notes.append(
            "the server's counters went down during this level (a restart): its acceptance covers only "
            "the time since the restart"
        )
    return notes


def per_request(metrics: dict | None) -> Measured | None:
    """vLLM's per-request speculation (a response's ``metrics.speculative_decoding``, vLLM PR 48915) counted as
    Phoenix counts its own passes: per verify step where the server gives the steps (``detailed``), else from the
    histogram of accepted lengths at its k. None where the response carries none (speculation off, or a server
    started without --per-request-spec-decode-metrics); a malformed object is None too, never a crash."""
    sd = (metrics or {}).get("speculative_decoding") if isinstance(metrics, dict) else None
    if not isinstance(sd, dict):
        return None
    try:
        steps = _steps(sd)
    except (TypeError, ValueError):
        return None
    m = Measured()
    for drafted, accepted in steps:
        m.count_pass(drafted, accepted)
    return m


def _steps(sd: dict) -> list[tuple[int, int]]:
    drafted, accepted = sd.get("per_step_drafted"), sd.get("per_step_accepted")
    if isinstance(drafted, list) and isinstance(accepted, list) and len(drafted) == len(accepted):
        pairs = [(_whole(d), _whole(a)) for d, a in zip(drafted, accepted)]
    else:
        k, hist = _whole(sd.get("num_spec_tokens")), sd.get("acceptance_histogram")
        if not isinstance(hist, list) or len(hist) > k + 1:
            raise ValueError("no histogram")
        pairs = [(k, j) for j, n in enumerate(hist) for _ in range(_whole(n))]
    if len(pairs) > 1 << 20 or any(a > d or d > MAX_POSITION for d, a in pairs):
        raise ValueError("counts out of range")
    return pairs


def _whole(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return value
