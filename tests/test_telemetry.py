"""Sentry through the real SDK over real HTTP to a local envelope receiver."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
import sentry_sdk
from helpers import CorruptingDecoder, bench_cfg

from benchmarks.sentry_receiver import Receiver
from engine.bench.run import execute
from engine.bench.setup import create_run
from engine.errors import PhoenixError
from engine.observe.sentry import SentryConfig, init
from engine.policies.wrappers import FallbackConfig


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    sentry_sdk.get_client().close(timeout=2)
    sentry_sdk.init(dsn=None)
    r.stop()


def wait_until(cond, timeout=15.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end and not cond():
        time.sleep(0.1)
    return cond()


def test_every_request_is_a_transaction_matching_its_database_row(receiver, store, tiny_dirs, prompt_file, decoder):
    telemetry = init(SentryConfig(dsn=receiver.dsn, profiling=True))
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_2", "bandit"], arms=[0, 2], max_new_tokens=10)
    run = create_run(store, cfg)
    execute(store, run.id, cfg, decoder=decoder, progress=False, telemetry=telemetry)
    rows = store.requests(run.id)
    assert wait_until(lambda: len(receiver.transactions()) >= len(rows))
    by_trace = {t["contexts"]["trace"]["trace_id"]: t for t in receiver.transactions()}
    for row in rows:
        txn = by_trace[row.trace_id]
        assert txn["transaction"] == row.mode
        assert txn["tags"] == {
            "arm": str(row.k),
            "mode": row.mode,
            "draft_model": cfg.draft,
            "target_model": cfg.target,
            "run_id": str(run.id),
        }
        data = txn["contexts"]["trace"]["data"]
        assert data["latency_seconds"] == pytest.approx(row.latency_s)
        assert (data["output_tokens"], data["draft_proposed"], data["draft_accepted"]) == (
            row.output_tokens,
            row.proposed,
            row.accepted,
        )
        assert data["tokens_per_s"] == pytest.approx(row.tokens_per_s)
        spans = {s["op"]: s for s in txn["spans"]}
        assert list(spans) == ["prefill", "draft.prefill", "draft", "verify"]
        for op, secs in (("prefill", row.prefill_s), ("draft", row.draft_s), ("verify", row.verify_s)):
            start, end = (
                datetime.fromisoformat(spans[op][k].replace("Z", "+00:00")) for k in ("start_timestamp", "timestamp")
            )
            assert (end - start).total_seconds() == pytest.approx(secs or 0.0, abs=1e-5)
    assert wait_until(lambda: len(receiver.logs()) >= len(rows))
    bodies = [log["body"] for log in receiver.logs()]
    assert sum(b.startswith("phoenix request") for b in bodies) == len(rows)
    assert sum(b.startswith("phoenix bandit") for b in bodies) == 3


def test_a_forced_mismatch_sends_a_divergence_warning(receiver, store, tiny_dirs, prompt_file, decoder):

    telemetry = init(SentryConfig(dsn=receiver.dsn, profiling=False))
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_2"], limit=1, max_new_tokens=10)
    run = create_run(store, cfg)
    execute(store, run.id, cfg, decoder=CorruptingDecoder(decoder.pair), progress=False, telemetry=telemetry)
    assert wait_until(lambda: any("diverged" in (e.get("message") or "") for e in receiver.events()))
    event = next(e for e in receiver.events() if "diverged" in (e.get("message") or ""))
    assert event["level"] == "warning" and "token 3" in event["message"]
    assert event["contexts"]["divergence"]["diverged_at"] == 3


def test_low_acceptance_sends_a_floor_warning(receiver, store, tiny_dirs, prompt_file, decoder):
    telemetry = init(SentryConfig(dsn=receiver.dsn, profiling=False, acceptance_floor=1.01))
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["model_2"], limit=1, max_new_tokens=10)
    run = create_run(store, cfg)
    execute(store, run.id, cfg, decoder=decoder, progress=False, telemetry=telemetry)
    assert wait_until(lambda: any("below the floor" in (e.get("message") or "") for e in receiver.events()))


def test_speculation_slower_than_target_falls_back_to_k0_with_a_warning(
    receiver, store, tiny_dirs, prompt_file, decoder
):
    from engine.decode.decoder import Decoder

    class SlowSpeculation(Decoder):
        """Speculative requests report 3x their latency, as an expensive draft would."""

        def run(self, prompt_ids, k, max_new_tokens, drafter="none", engine="phoenix", choose_k=None, **kw):
            stats = super().run(prompt_ids, k, max_new_tokens, drafter, engine, choose_k, **kw)
            if k > 0:
                stats.latency_s *= 3
            return stats

    telemetry = init(SentryConfig(dsn=receiver.dsn, profiling=False))
    cfg = bench_cfg(
        tiny_dirs,
        prompt_file,
        modes=["target", "bandit"],
        arms=[2, 4],
        limit=4,
        max_new_tokens=10,
        fallback=FallbackConfig(enabled=True, window=2),
    )
    run = create_run(store, cfg)
    execute(store, run.id, cfg, decoder=SlowSpeculation(decoder.pair), progress=False, telemetry=telemetry)
    steps = [s for _, s in store.bandit_steps(run.id)]
    assert [(s.chosen_k > 0, s.fallback) for s in steps] == [(True, False), (True, False), (False, True), (False, True)]
    assert all(r.identical for r in store.requests(run.id))
    assert wait_until(lambda: any("falling back to k=0" in (e.get("message") or "") for e in receiver.events()))
    event = next(e for e in receiver.events() if "falling back" in (e.get("message") or ""))
    assert event["level"] == "warning" and event["tags"]["mode"] == "bandit"


@pytest.mark.parametrize(
    "dsn,pattern",
    [
        ("not a dsn", "malformed"),
        ("https://secretkey@", "malformed"),
        ("http://secretkey@127.0.0.1:1/1", "cannot be reached"),
    ],
)
def test_a_bad_dsn_fails_at_start_with_one_line_that_hides_the_key(dsn, pattern):
    with pytest.raises(PhoenixError, match=pattern) as err:
        init(SentryConfig(dsn=dsn, connect_timeout_s=1.0))
    assert "secretkey" not in str(err.value) and "\n" not in str(err.value)


def test_without_a_dsn_sentry_is_off_and_trace_ids_are_still_made(store, tiny_dirs, prompt_file, decoder):
    telemetry = init(SentryConfig(dsn=None))
    assert telemetry.enabled is False
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["model_2"], limit=1, max_new_tokens=10)
    run = create_run(store, cfg)
    execute(store, run.id, cfg, decoder=decoder, progress=False, telemetry=telemetry)
    assert all(len(r.trace_id) == 32 for r in store.requests(run.id))


def test_generation_and_writes_carry_on_when_the_receiver_dies_mid_run(
    receiver, store, tiny_dirs, prompt_file, decoder
):
    telemetry = init(SentryConfig(dsn=receiver.dsn, profiling=False))
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_2"], limit=4, max_new_tokens=10)
    run = create_run(store, cfg)
    seen = []

    def kill_receiver_after_two(rec, stats):
        seen.append(rec)
        if len(seen) == 2:
            receiver.stop()

    assert (
        execute(
            store, run.id, cfg, decoder=decoder, progress=False, telemetry=telemetry, on_request=kill_receiver_after_two
        )
        == "done"
    )
    assert len(store.requests(run.id)) == 8


def test_the_dsn_never_reaches_the_database(receiver, store, tiny_dirs, prompt_file, decoder):
    telemetry = init(SentryConfig(dsn=receiver.dsn, profiling=False))
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["model_2"], limit=1, max_new_tokens=10)
    run = create_run(store, cfg)
    execute(store, run.id, cfg, decoder=decoder, progress=False, telemetry=telemetry)
    raw = open(store.url.removeprefix("sqlite:///"), "rb").read()
    assert b"publickey" not in raw
