"""Policy wrappers: per-pass k within a request, and the safety fallback to k=0.
Each wraps any Policy and is one itself."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from engine.errors import PhoenixError
from engine.policies.online_model import OnlineModel
from engine.policies.types import Decision, Observation, PassController, PassState, Policy


@dataclass
class FallbackConfig:
    enabled: bool = False  # drop to k=0 while speculation runs slower than target-only
    window: int = 8  # speculative requests averaged before judging
    margin: float = 0.05  # how much slower than target-only counts as slower
    probe_every: int = 4  # while fallen back, every Nth request probes the policy's choice
    recover_probes: int = 2  # probes that must beat target-only by the margin to recover

    def validate(self) -> FallbackConfig:
        if self.window < 1 or self.probe_every < 1 or self.recover_probes < 1 or not 0 <= self.margin < 1:
            raise PhoenixError(
                "--fallback-window, --fallback-probe-every and --fallback-recover-probes must be >= 1 "
                "and --fallback-margin in [0, 1)",
                field="fallback",
            )
        return self


@dataclass
class PassAdaptive:
    """k may change between verification passes of one request (the DISCO / SpecDec++
    idea). The request starts at the inner policy's k; after each pass, the per-token
    acceptance seen so far in this request (a Beta posterior whose prior is the run's
    fitted acceptance, worth ``prior_passes`` passes) and the run's fitted pass cost
    pick the arm with the best predicted tokens/sec. Policies with their own per-pass
    rule (ema_hysteresis) keep it. A request whose k is 0 stays target-only."""

    inner: Policy
    prior_passes: float = 10.0
    model: OnlineModel = field(default_factory=OnlineModel)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def arms(self):
        return self.inner.arms

    @property
    def t(self) -> int:
        return self.inner.t

    def choose(self, prompt_tokens: int | None = None, category: str | None = None) -> Decision:
        return self.inner.choose(prompt_tokens, category)

    def update(self, k: int, reward: float, obs: Observation | None = None) -> None:
        self.inner.update(k, reward, obs)
        if obs is not None:
            self.model.observe(obs)

    def snapshot(self):
        return self.inner.snapshot()

    def observe_reference(self, tokens_per_s: float) -> None:
        self.inner.observe_reference(tokens_per_s)

    def pass_rule(self, decision: Decision) -> PassController | None:
        return self.inner.pass_rule(decision)

    def pass_controller(self, decision: Decision) -> PassController | None:
        own = self.inner.pass_rule(decision)  # a policy's own per-pass rule (ema_hysteresis) wins over the model
        if own is not None or decision.arm == 0 or not self.model.ready:
            return own
        a_run = self.model.conditional_acceptance()
        v0, v1, _, _ = self.model.cost_fit()
        cost = v1 + self.model.draft_cost()
        arms = sorted(self.arms)
        m = self.prior_passes
        seen = PassState()

        def choose_k(last) -> int:
            if last is None:
                return decision.arm
            p, a = last.proposed, last.accepted
            seen.ok += a
            seen.fail += 1.0 if a < p else 0.0
            rate = (m * a_run + seen.ok) / (m + seen.ok + seen.fail)
            rate = min(rate, 0.999)
            return max(arms, key=lambda k: ((1 - rate ** (k + 1)) / (1 - rate) / max(v0 + cost * k, 1e-9), -k))

        return choose_k


@dataclass
class Fallback:
    """Drop to k=0 when the last ``window`` speculative requests ran slower than the
    target-only baseline by more than ``margin``; probe the inner policy's choice
    every ``probe_every`` decisions and recover once ``recover_probes`` probes beat
    the baseline by ``margin``. The baseline is the mean tokens/sec of target-only
    requests (this policy's k=0 requests and the run's target mode); with none yet,
    the first decision measures it."""

    inner: Policy
    cfg: FallbackConfig = field(default_factory=FallbackConfig)
    t: int = 0
    engaged: bool = False
    since: int = 0
    base_sum: float = 0.0
    base_n: int = 0
    pending: str | None = None

    def __post_init__(self):
        self.recent: deque = deque(maxlen=self.cfg.window)
        self.probes: deque = deque(maxlen=self.cfg.recover_probes)

    name = property(lambda self: self.inner.name)
    arms = property(lambda self: self.inner.arms)

    @property
    def baseline(self) -> float | None:
        return self.base_sum / self.base_n if self.base_n else None

    def is_probe(self) -> bool:
        return self.engaged and self.since % self.cfg.probe_every == self.cfg.probe_every - 1

    def choose(self, prompt_tokens: int | None = None, category: str | None = None) -> Decision:
        if self.baseline is None:
            d = Decision(t=self.t, arm=0, explored=True, policy=self.name)
        elif self.engaged and not self.is_probe():
            d = Decision(t=self.t, arm=0, explored=False, policy=self.name, fallback=True)
        else:
            d = replace(self.inner.choose(prompt_tokens, category), t=self.t)
        return replace(d, event=self.pending)

    def update(self, k: int, reward: float, obs: Observation | None = None) -> None:
        self.pending = None
        if k in self.inner.arms:
            self.inner.update(k, reward, obs)
        if k == 0:
            self.observe_reference(reward)
        elif self.engaged:
            self.probes.append(reward)
            if (
                len(self.probes) == self.cfg.recover_probes
                and self.baseline is not None
                and min(self.probes) > self.baseline * (1 + self.cfg.margin)
            ):
                self.engaged, self.pending = False, "fallback_recovered"
                self.recent.clear()
        elif self.baseline is not None:
            self.recent.append(reward)
            if len(self.recent) == self.cfg.window and sum(self.recent) / self.cfg.window < self.baseline * (
                1 - self.cfg.margin
            ):
                self.engaged, self.pending, self.since = True, "fallback_engaged", -1
                self.probes.clear()
        if self.engaged:
            self.since += 1
        self.t += 1

    def observe_reference(self, tokens_per_s: float) -> None:
        if tokens_per_s > 0:
            self.base_sum += tokens_per_s
            self.base_n += 1

    def snapshot(self):
        return self.inner.snapshot()

    def pass_controller(self, decision: Decision) -> PassController | None:
        return None if decision.fallback else self.inner.pass_controller(decision)

    def pass_rule(self, decision: Decision) -> PassController | None:
        return None if decision.fallback else self.inner.pass_rule(decision)
