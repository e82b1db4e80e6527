"""A drafter chosen per step: every drafter the server loaded is kept in step with the request, and the tuner
(engine.serve.tuner) names the one that proposes in each step, from each one's measured acceptance per position
and drafting cost at the batch it runs in. The hybrid's fixed rule (the suffix trees above a calibrated score,
else the head) becomes a measured choice: on prompts in the style of no training set, prompt lookup beat the head
at concurrency 1-4 (runs #53-#55) while a request kept the drafter it asked for.

The members that do not propose still see every pass: the head observes the target's taps of every position (it
catches up on them in one forward when chosen again), the suffix trees and the draft model read the context they
missed at their next proposal. ``source`` names the member behind the last proposal, so a request's passes are
counted per drafter (``per_source``), as the hybrid's are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch

from engine.decode.drafters import Drafter


class ChoiceDrafter(Drafter):
    name = "choice"

    def __init__(self, members: dict[str, Drafter]):
        if not members:
            raise ValueError("a choice needs at least one drafter")
        self.members = members
        self.current = next(iter(members))
        self.taps = next((d.taps for d in members.values() if d.taps), ())

    def options(self) -> tuple[str, ...]:
        return tuple(self.members)

    def use(self, kind: str) -> None:
        self.current = kind

    def propose(self, context: list[int], k: int) -> list[int]:
        self.source = self.current
        return self.members[self.current].propose(context, k)

    def reset(self, prompt_ids: list[int]) -> None:
        for d in self.members.values():
            d.reset(prompt_ids)
        self.source = None

    def observe(self, features: torch.Tensor) -> None:
        for d in self.members.values():
            if d.taps:
                d.observe(features)

    def rollback(self, final_len: int) -> None:
        for d in self.members.values():
            d.rollback(final_len)

    def finish(self, prompt_ids: list[int], output_ids: list[int]) -> None:
        for d in self.members.values():
            d.finish(prompt_ids, output_ids)

    def fork(self) -> ChoiceDrafter:
        return ChoiceDrafter({kind: d.fork() for kind, d in self.members.items()})

    def batch_key(self) -> object | None:
        key = self.members[self.current].batch_key()
        return None if key is None else ("choice", self.current, key)

    @classmethod
    def propose_batch(cls, drafters: Sequence[Drafter], contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        rows = [cast(ChoiceDrafter, d) for d in drafters]  # one batch key: every row a choice on one member kind
        for d in rows:
            d.source = d.current
        chosen = [d.members[d.current] for d in rows]
        return type(chosen[0]).propose_batch(chosen, contexts, ks)
