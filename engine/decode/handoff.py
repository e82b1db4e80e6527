"""What passes between the engine core's parts, each hand-off a named type (vLLM's ``SchedulerOutput`` and
``ModelRunnerOutput`` between ``schedule``, ``execute_model`` and ``update_from_output``; ``RequestOutput`` to the
front end), so a step reads as a route: the scheduler's ``DecodePlan`` (which rows, each one's k and drafter),
the pass's ``PassOutput`` (drafts, what the target accepted, the seconds), and per request a ``RequestOutput`` to
every ``Subscriber`` (the recorder, the client's streams). No closure crosses a thread: a subscriber is an object
the core was given, and the request itself carries no callback into the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch
from transformers import DynamicCache

from engine.decode.sampling import TokenLogprob
from engine.decode.sequence import Finished, PassOutcome, Request, Sequence
from engine.decode.steps import Choice, RowAcceptance, StepRecord


@dataclass(eq=False)
class Row:
    """A request the core holds: its sequence, its wait, and its cache while its prompt goes in."""

    req: Request
    seq: Sequence
    queue_s: float = 0.0
    cache: DynamicCache | None = None  # its own cache while its prompt is prefilled; then the batch holds it
    batch_sizes: list[int] = field(default_factory=list)
    acceptance: RowAcceptance = field(default_factory=RowAcceptance)  # its own recent passes: held off below break-even


@dataclass
class DecodePlan:
    """``schedule``'s answer for one verification pass: the running rows, each one's k and drafter, and the
    tuner's choice behind them (for the step's record)."""

    rows: list[Row]
    ks: list[int]
    used: list[str]  # the drafter each row drafts with this pass (a choice row: the one the tuner named)
    choice: Choice | None
    main: str  # the drafter most rows draft with: the step record's
    off: int = 0  # rows the tuner would draft for, held at k = 0 by their own acceptance


@dataclass
class PassOutput:
    """``execute``'s answer: each row's drafts and drafting seconds, what the target accepted, the verify's time;
    for prompts' chunks that ran in the verify's forward (engine.decode.mixed), each one's first token (where it
    was its prompt's last chunk) and taps."""

    drafted: list[list[int]]
    draft_s: list[float]
    outcomes: list[PassOutcome]
    started: float  # the clock at the verify's start
    verify_s: float  # the whole forward's, chunks included: what every row in it waited
    chunks: list[tuple[int | None, torch.Tensor | None]] = field(default_factory=list)


@dataclass(frozen=True)
class RequestOutput:
    """What one step did for one request: its new tokens (with their logprobs where it asked), or its end."""

    request: Request
    tokens: list[int]
    logprobs: list[TokenLogprob]
    finished: Finished | None = None


def step_record(step: int, at_s: float, p: DecodePlan, out: PassOutput, emitted: int) -> StepRecord:
    """The pass as the server's ``serve_steps`` row keeps it: the plan's choice beside what the pass did."""
    choice = p.choice
    return StepRecord(
        step=step,
        at_s=at_s,
        batch=len(p.rows),
        width=1 + max(len(d) for d in out.drafted),
        drafter=p.main,
        k=choice.k if choice else None,
        explored=choice.explored if choice else None,
        estimate=choice.estimate if choice else None,
        estimate_off=choice.estimate_off if choice else None,
        draft_s=sum(out.draft_s),
        verify_s=out.verify_s,
        proposed=sum(o.proposed for o in out.outcomes),
        accepted=sum(o.accepted for o in out.outcomes),
        emitted=emitted,
        rows_off=p.off,
    )


class Subscriber(Protocol):
    """Gets every ``RequestOutput``, on the loop's thread, in order; it must not block (a queue's put, a hand-over
    to an event loop). What it raises is its own: the loop goes on."""

    def publish(self, output: RequestOutput) -> None: ...


class Callbacks:
    """The request's own ``on_tokens`` / ``on_done``, called where the core steps: for a caller stepping the core
    on its own thread (tests, scripts). The server and the bench go through ``engine.decode.client``."""

    def publish(self, output: RequestOutput) -> None:
        req = output.request
        if output.tokens and req.on_tokens is not None:
            req.on_tokens(output.tokens, output.logprobs)
        if output.finished is not None and req.on_done is not None:
            req.on_done(output.finished)
