"""What the engine core's step reports and whom it consults: a plain record of every step (the server stores it
as a ``serve_steps`` row), and the tuner that chooses k for rows that fixed none (engine.serve.tuner), with its
choice. Plain data: no database type reaches the decoding loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engine.measure import StepRecord  # noqa: F401  (re-exported: the step's record, defined once)


@dataclass(frozen=True)
class Choice:
    """One step's decision for the rows drafting with one drafter: k, whether it explored, and the estimates."""

    k: int
    explored: bool
    estimate: float  # expected tokens/s of the batch at k
    estimate_off: float  # ... at k = 0 (speculation off)
    drafter: str | None = None  # the drafter chosen, where the rows let the tuner choose it too


class Tuner(Protocol):
    """What chooses k for rows that did not fix their own, and learns from every step (engine.serve.tuner)."""

    def choose(self, drafter: str, batch: int) -> Choice: ...

    def choose_drafter(self, drafters: tuple[str, ...], batch: int) -> Choice: ...

    def observe_forward(self, batch: int, tokens: int, seconds: float) -> None: ...

    def observe_pass(self, drafter: str, asked: int, proposed: int, accepted: int, draft_s: float) -> None: ...
