"""One independent copy of a base policy per context: a prompt-length bucket, or the prompt's category."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from engine.modes import DEFAULT_ARMS
from engine.policies.types import Decision, Observation, PassController, Policy, PolicyDefaults

CONTEXT_EDGES = (96, 192)  # prompt tokens: 34 / 93 / 37 of HumanEval's 164 prompts with the embedded tokenizer


@dataclass
class Contextual(PolicyDefaults):
    """One independent copy of a base policy per context: a prompt-length bucket, or the prompt's category."""

    base: str  # name of the base policy
    factory: Callable[..., Policy]  # builds one base policy: factory(arms=..., seed=...)
    arms: tuple[int, ...] = DEFAULT_ARMS
    seed: int = 42
    edges: tuple[int, ...] = CONTEXT_EDGES
    t: int = 0
    inners: dict = field(default_factory=dict)
    last: int | str = 0
    by: str = "length"  # length | category

    def __post_init__(self):
        self.name = f"{'category' if self.by == 'category' else 'contextual'}_{self.base}"

    def key(self, prompt_tokens: int | None, category: str | None) -> int | str:
        if self.by == "category":
            return category or ""
        return bisect.bisect_right(self.edges, prompt_tokens or 0)

    def inner(self, prompt_tokens: int | None, category: str | None = None) -> Policy:
        b = self.key(prompt_tokens, category)
        if b not in self.inners:
            salt = b if isinstance(b, int) else sum(map(ord, b))  # a stable seed per context, not Python's hash
            self.inners[b] = self.factory(arms=self.arms, seed=self.seed * 100 + salt)
        self.last = b
        return self.inners[b]

    def choose(self, prompt_tokens: int | None = None, category: str | None = None) -> Decision:
        return replace(self.inner(prompt_tokens, category).choose(prompt_tokens, category), t=self.t, policy=self.name)

    def update(self, k: int, reward: float, obs: Observation | None = None) -> None:
        self.inner(obs.prompt_tokens if obs else None, obs.category if obs else None).update(k, reward, obs)
        self.t += 1

    def snapshot(self) -> tuple[dict, dict]:
        return self.inner_last().snapshot()

    def inner_last(self) -> Policy:
        return self.inners.get(self.last) or self.inner(None)

    def pass_controller(self, decision: Decision) -> PassController | None:
        return self.inner_last().pass_controller(decision)

    def pass_rule(self, decision: Decision) -> PassController | None:
        return self.inner_last().pass_rule(decision)
