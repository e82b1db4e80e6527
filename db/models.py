"""SQLAlchemy 2.0 typed models. Names are public: other tools query these tables."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, false
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(20), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    config: Mapped[dict] = mapped_column(JSON)
    target: Mapped[str] = mapped_column(String(500))
    draft: Mapped[str | None] = mapped_column(String(500), nullable=True)
    progress_done: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    worker_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    note: Mapped[str | None] = mapped_column(Text, nullable=True)  # why the run was made, Markdown (0012)
    archived: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())  # hidden from lists (0013)


class RunTag(Base):
    __tablename__ = "run_tags"  # 0011
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(100), primary_key=True, index=True)


class Baseline(Base):
    __tablename__ = "baselines"  # 0014: one pinned run per target model
    target: Mapped[str] = mapped_column(String(500), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))


class Request(Base):
    __tablename__ = "requests"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    mode: Mapped[str] = mapped_column(String(40))
    k: Mapped[int] = mapped_column(Integer)
    prompt_id: Mapped[str] = mapped_column(String(200))
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)
    latency_s: Mapped[float] = mapped_column(Float)
    ttft_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    tokens_per_s: Mapped[float] = mapped_column(Float)
    proposed: Mapped[int] = mapped_column(Integer)
    accepted: Mapped[int] = mapped_column(Integer)
    passes: Mapped[int] = mapped_column(Integer)
    draft_s: Mapped[float] = mapped_column(Float)
    verify_s: Mapped[float] = mapped_column(Float)  # decode passes only; prefill apart since 0016
    prefill_s: Mapped[float | None] = mapped_column(Float, nullable=True)  # the target's prefill (0016)
    draft_prefill_s: Mapped[float | None] = mapped_column(
        Float, nullable=True
    )  # the drafter's reset (0016); NULL before
    output_text: Mapped[str] = mapped_column(Text)
    output_sha256: Mapped[str] = mapped_column(String(64))
    identical: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    diverged_at: Mapped[int | None] = mapped_column(Integer, nullable=True)
    trace_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    warmup: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str | None] = mapped_column(
        Text, nullable=True
    )  # a request that failed (a server's answer), else NULL (0010)
    drafter: Mapped[str | None] = mapped_column(String(20), nullable=True)  # what drafted (0018); NULL before
    turn: Mapped[int | None] = mapped_column(Integer, nullable=True)  # conversation turn, multi-turn sets (0019)
    category: Mapped[str | None] = mapped_column(String(40), nullable=True)  # the prompt's category (0019)
    queue_s: Mapped[float | None] = mapped_column(Float, nullable=True)  # served: waiting before the prefill (0024)
    batch_size: Mapped[float | None] = mapped_column(Float, nullable=True)  # served: its passes' mean batch (0024)
    per_source: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)  # a hybrid by source (0025)
    cached_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)  # served: from the prefix cache (0027)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    __table_args__ = (
        Index("ix_requests_run_mode", "run_id", "mode", "warmup"),
        Index("ix_requests_mode_run_latency", "mode", "run_id", "warmup", "latency_s"),  # percentiles walk it (0009)
        Index("ix_requests_run_seq", "run_id", "seq"),
        Index("ix_requests_trace_id", "trace_id"),
    )


class RequestPosition(Base):
    __tablename__ = "request_positions"
    request_id: Mapped[int] = mapped_column(ForeignKey("requests.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    proposed: Mapped[int] = mapped_column(Integer)
    accepted: Mapped[int] = mapped_column(Integer)
    reached: Mapped[int | None] = mapped_column(Integer, nullable=True)  # see PositionCount.reached (0015)


class BanditStep(Base):
    __tablename__ = "bandit_steps"
    request_id: Mapped[int] = mapped_column(ForeignKey("requests.id", ondelete="CASCADE"), primary_key=True)
    t: Mapped[int] = mapped_column(Integer)
    epsilon: Mapped[float | None] = mapped_column(Float, nullable=True)  # epsilon-greedy's exploration probability
    p_not_best: Mapped[float | None] = mapped_column(Float, nullable=True)  # model-based: P(predicted best is not best)
    explored: Mapped[bool] = mapped_column(Boolean)
    chosen_k: Mapped[int] = mapped_column(Integer)
    arm_means: Mapped[dict] = mapped_column(JSON)
    arm_counts: Mapped[dict] = mapped_column(JSON)
    reward: Mapped[float] = mapped_column(Float)
    policy: Mapped[str | None] = mapped_column(String(80), nullable=True)  # NULL on rows before 0004: epsilon_greedy
    fallback: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    arm: Mapped[str | None] = mapped_column(String(40), nullable=True)  # a drafter-choosing policy's arm (0018)


class RunPrompt(Base):
    """Each prompt a run sent, once per run (0022): the Requests page shows the text the run decoded, not a file
    read again later, which may have moved or changed."""

    __tablename__ = "run_prompts"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    prompt_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    text: Mapped[str] = mapped_column(Text)


class WatchInterval(Base):
    """One interval of `engines watch`: a live server's spec-decode counters, as deltas over the interval (0021;
    before, each was a fake request named interval-N)."""

    __tablename__ = "watch_intervals"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    seconds: Mapped[float] = mapped_column(Float)
    drafts: Mapped[int] = mapped_column(Integer)
    draft_tokens: Mapped[int] = mapped_column(Integer)
    accepted: Mapped[int] = mapped_column(Integer)
    generation_tokens: Mapped[int] = mapped_column(Integer)
    per_position: Mapped[list] = mapped_column(JSON)  # accepted per draft position (vLLM's unconditional counts)


class ServeStep(Base):
    """One step of Phoenix's server loop: the batch, the widest row, the tuner's decision and what it gave (0023)."""

    __tablename__ = "serve_steps"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    at_s: Mapped[float] = mapped_column(Float)  # seconds since the server's loop started
    batch: Mapped[int] = mapped_column(Integer)
    width: Mapped[int] = mapped_column(Integer)  # tokens per row of the forward: 1 + the longest draft
    drafter: Mapped[str] = mapped_column(String(40))
    k: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the tuner's k; None where every row fixed its own
    explored: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    estimate: Mapped[float | None] = mapped_column(Float, nullable=True)  # expected tokens/s at k
    estimate_off: Mapped[float | None] = mapped_column(Float, nullable=True)  # ... with speculation off
    draft_s: Mapped[float] = mapped_column(Float)
    verify_s: Mapped[float] = mapped_column(Float)
    proposed: Mapped[int] = mapped_column(Integer)
    accepted: Mapped[int] = mapped_column(Integer)
    emitted: Mapped[int] = mapped_column(Integer)
    prefill_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # prompt chunks (0026)
    rows_off: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # held off by acceptance (0028)


class Distill(Base):
    """One draft-distillation job: its config, loss curve, stage timings and its before/after evaluation runs."""

    __tablename__ = "distills"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    status: Mapped[str] = mapped_column(String(20))
    config: Mapped[dict] = mapped_column(JSON)
    out_dir: Mapped[str] = mapped_column(String(500))
    losses: Mapped[list] = mapped_column(JSON, default=list)
    stage_seconds: Mapped[dict] = mapped_column(JSON, default=dict)
    before_run_id: Mapped[int | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), nullable=True, index=True
    )
    after_run_id: Mapped[int | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), nullable=True, index=True
    )
    evaluation: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
