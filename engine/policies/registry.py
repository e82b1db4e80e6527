"""Every policy by name: the base policies, their contextual copies, and the wrappers."""

from __future__ import annotations

from engine.modes import GRANULARITIES
from engine.policies.bandits import UCB1, EpsilonGreedy, Thompson
from engine.policies.contextual import Contextual
from engine.policies.ema import EmaHysteresis
from engine.policies.model_based import ModelBased
from engine.policies.types import Policy
from engine.policies.wrappers import Fallback, FallbackConfig, PassAdaptive

BASE_POLICIES = {
    "epsilon_greedy": EpsilonGreedy,
    "ucb1": UCB1,
    "thompson": Thompson,
    "model_based": ModelBased,
    "ema_hysteresis": EmaHysteresis,
}
CONTEXTUAL = "contextual_"  # one copy per prompt-length bucket
CATEGORY = "category_"  # one copy per category (Spec-Bench's column group)
REWARD_ONLY = ("epsilon_greedy", "ucb1", "thompson")  # learn from tokens/s alone, so any arm labels work


def policy_names() -> list[str]:
    return list(BASE_POLICIES) + [f"{prefix}{b}" for prefix in (CONTEXTUAL, CATEGORY) for b in BASE_POLICIES]


def make_policy(
    name: str, arms, seed: int, granularity: str = "request", fallback: FallbackConfig | None = None
) -> Policy:
    """The named policy, wrapped per pass and in the safety fallback when asked."""
    base = name.removeprefix(CONTEXTUAL).removeprefix(CATEGORY)
    if base not in BASE_POLICIES:
        raise ValueError(f"unknown policy {name!r}: use {', '.join(policy_names())}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"unknown granularity {granularity!r}: use {' or '.join(GRANULARITIES)}")
    if name.startswith((CONTEXTUAL, CATEGORY)):
        by = "category" if name.startswith(CATEGORY) else "length"
        policy: Policy = Contextual(base, BASE_POLICIES[base], arms=tuple(arms), seed=seed, by=by)
    else:
        policy = BASE_POLICIES[base](arms=tuple(arms), seed=seed)
    if granularity == "pass":
        policy = PassAdaptive(policy)
    if fallback is not None and fallback.enabled:
        policy = Fallback(policy, fallback)
    return policy
