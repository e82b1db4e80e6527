"""The acceptance-threshold controller of serving stacks, as a baseline policy."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.modes import DEFAULT_ARMS
from engine.policies.types import Decision, Observation, PassController, PassState, PolicyDefaults


@dataclass
class EmaHysteresis(PolicyDefaults):
    """The acceptance-threshold controller of serving stacks: an EMA of each
    request's acceptance rate steps k up one drafting arm above ``up`` and down one
    below ``down``. It never drafts zero: acceptance is unobservable there."""

    arms: tuple[int, ...] = DEFAULT_ARMS
    seed: int = 42
    alpha: float = 0.3  # EMA weight of the newest rate
    up: float = 0.8
    down: float = 0.5
    name: str = "ema_hysteresis"
    t: int = 0
    ema: float | None = None
    counts: dict[int, int] = field(default_factory=dict)

    def __post_init__(self):
        self.arms = tuple(sorted(self.arms))
        self.ladder = [a for a in self.arms if a > 0] or [self.arms[0]]
        self.idx = (len(self.ladder) - 1) // 2
        self.counts = {a: self.counts.get(a, 0) for a in self.arms}

    @staticmethod
    def step(ema, idx, rate, alpha, up, down, top) -> tuple[float, int]:
        ema = rate if ema is None else (1 - alpha) * ema + alpha * rate
        if ema > up and idx < top:
            idx += 1
        elif ema < down and idx > 0:
            idx -= 1
        return ema, idx

    def choose(self, prompt_tokens: int | None = None, category: str | None = None) -> Decision:
        return Decision(t=self.t, arm=self.ladder[self.idx], explored=False, policy=self.name)

    def update(self, k: int, reward: float, obs: Observation | None = None) -> None:
        self.tally(k)
        if obs is not None and obs.proposed:
            self.ema, self.idx = self.step(
                self.ema, self.idx, obs.accepted / obs.proposed, self.alpha, self.up, self.down, len(self.ladder) - 1
            )

    def snapshot(self) -> tuple[dict, dict]:
        return (
            {str(a): (self.ema or 0.0) if a == self.ladder[self.idx] else 0.0 for a in self.arms},
            {str(a): self.counts[a] for a in self.arms},
        )

    def pass_rule(self, decision: Decision) -> PassController:
        """Within a request, a private copy of the EMA steps k after every pass. Used only at pass granularity
        (``bandit:ema_hysteresis:pass``, through PassAdaptive); at request granularity k stays put."""
        state = PassState(
            ema=self.ema, idx=self.ladder.index(decision.arm) if decision.arm in self.ladder else self.idx
        )

        def choose_k(last) -> int:
            if last is not None:
                p, a = last.proposed, last.accepted
                if p:
                    state.ema, state.idx = self.step(
                        state.ema, state.idx, a / p, self.alpha, self.up, self.down, len(self.ladder) - 1
                    )
            return self.ladder[state.idx]

        return choose_k
