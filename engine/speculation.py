"""Every spelling of speculation Phoenix has stored or accepts, as one grammar: ``<drafter>[:k|auto]`` or ``off``
(engine.runspec's module doc lists the aliases: lab modes, load variants, managed engines' variants, served modes
and the request field ``{"speculation": {"drafter": ..., "k": ...}}``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.modes import Mode

AUTO = None  # k chosen as it runs (the tuner, a bandit)
# engines' own names for Phoenix's drafters: vLLM's draft_model, llama.cpp's draft-simple and draft-eagle3
ALIASES = {"draft-model": "model", "draft_model": "model", "draft-simple": "model", "draft-eagle3": "eagle3"}
DRAFTED = ("model", "eagle3", "hybrid", "bandit")  # the drafters that run a draft model or head: a spec names it
_VARIANT = re.compile(
    r"^(?P<drafter>[a-z0-9]+(?:-(?!k\d|n\d|m\d|auto\b|table\b|eager\b)[a-z0-9]+)*)"
    r"(?P<opts>(?:-(?:k\d+|n\d+|m\d+|auto|table|eager))*)$"
)
_LOAD_SHORT = re.compile(r"^k(?P<k>\d+)$")


@dataclass(frozen=True)
class Speculation:
    drafter: str  # none | model | ngram | suffix | eagle3 | hybrid | choice | bandit | an engine's own (ngram-mod)
    k: int | None = AUTO  # None: chosen as it runs
    options: str = ""  # what else the spelling fixed: -n2-m4 (lookup sizes), -table, -eager, -conf, :policy

    def text(self) -> str:
        """The one spelling every page shows: off, eagle3:3, ngram:auto, ngram-mod:8 -n4."""
        if self.drafter == "none":
            return "off" + (f" {self.options}" if self.options else "")
        k = "auto" if self.k is None else str(self.k)
        return f"{self.drafter}:{k}" + (f" {self.options}" if self.options else "")

    @classmethod
    def parse(cls, spelling, server_drafter: str | None = None) -> Speculation:
        """Any spelling Phoenix has stored or accepts (see the module's doc), or a request's speculation object.
        ``server_drafter``: what a Phoenix server drafts with where the spelling leaves it out (``auto``, ``k3``)."""
        if isinstance(spelling, dict):
            drafter = spelling.get("drafter") or server_drafter or "as-served"
            k = spelling.get("k")
            return cls("none" if drafter == "none" else drafter, k if isinstance(k, int) else AUTO)
        text = str(spelling or "").strip()
        served = re.fullmatch(r"(?:vllm|sglang|llamacpp|phoenix)-(?P<v>.+?)_(?:c\d+|live|watch)", text)
        if served:
            text = served["v"]
        if text in ("", "as-served", "as served"):
            return cls("as-served", AUTO)
        if text in ("none", "target", "off"):
            return cls("none", 0)
        if text == "auto":
            return cls(server_drafter or "tuner", AUTO)
        short = _LOAD_SHORT.match(text)
        if short:
            k = int(short["k"])
            return cls("none", 0) if k == 0 else cls(server_drafter or "tuner", k)
        canon = re.fullmatch(r"(?P<d>[a-z0-9-]+):(?P<k>\d+|auto)(?: (?P<o>.+))?", text)
        if canon:
            return cls(canon["d"], None if canon["k"] == "auto" else int(canon["k"]), canon["o"] or "")
        mode = Mode.of(text)
        if mode.kind == "bandit":
            policy = ":".join(p for p in (mode.policy, mode.granularity) if p)
            return cls("bandit", AUTO, policy)
        if mode.kind in ("model", "ngram", "suffix", "eagle3", "hybrid", "fixed", "hf") and mode.k is not None:
            drafter = server_drafter if mode.kind == "fixed" and server_drafter else mode.kind
            return cls(drafter, mode.k, "-conf" if mode.confident else "")
        m = _VARIANT.match(text)
        if m is None:
            return cls(text, AUTO)
        drafter = ALIASES.get(m["drafter"], m["drafter"])
        opts = m["opts"]
        k = re.search(r"-k(\d+)", opts)
        rest = re.sub(r"-k\d+|-auto", "", opts).strip()
        if drafter == "none":
            return cls("none", 0, rest)
        return cls(drafter, int(k[1]) if k else AUTO, rest)
