"""Configs to flags: one path for every command, typed, documented from the field comments."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field

import pytest

from engine.bench.config import BenchConfig, stored
from engine.config import add_options, field_help, from_args, from_dict
from engine.errors import PhoenixError
from engine.observe.sentry import SentryConfig
from engine.policies.wrappers import FallbackConfig


@dataclass
class Inner:
    enabled: bool = False  # switch it on
    size: int = 3  # how many


@dataclass
class Outer:
    name: str = "x"  # what to call it
    ratio: float = 0.5
    limit: int | None = 10  # at most this many
    ks: list[int] = field(default_factory=lambda: [1, 2])  # the ks
    loud: bool = True  # say things
    inner: Inner = field(default_factory=Inner)
    poll_s: float = field(default=1.0, metadata={"flag": "--poll"})  # an established name


def parse(cls, *argv, prefix=""):
    p = argparse.ArgumentParser()
    add_options(p, cls, prefix=prefix)
    return from_args(cls, p.parse_args(list(argv)), prefix=prefix)


def test_no_flags_give_the_dataclass_defaults():
    assert parse(Outer) == Outer()


def test_every_field_becomes_a_typed_flag_with_nested_and_negated_forms():
    cfg = parse(
        Outer,
        "--name",
        "y",
        "--ratio",
        "0.25",
        "--limit",
        "none",
        "--ks",
        "4, 8",
        "--no-loud",
        "--inner",
        "--inner-size",
        "7",
        "--poll",
        "0.2",
    )
    assert cfg == Outer("y", 0.25, None, [4, 8], False, Inner(True, 7), 0.2)


def test_help_text_comes_from_the_field_comments():
    assert field_help(Outer)["limit"] == "at most this many"
    p = argparse.ArgumentParser()
    add_options(p, Outer)
    assert "at most this many (default 10)" in p.format_help() and "switch it on" in p.format_help()


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--ratio", "half"], "--ratio expects a number, got 'half'"),
        (["--ks", "1,two"], "--ks must be comma-separated whole numbers"),
        (["--inner-size", "big"], "--inner-size expects a number"),
    ],
)
def test_a_bad_value_names_its_flag(argv, message):
    with pytest.raises(PhoenixError, match=message):
        parse(Outer, *argv)


def test_unknown_keys_are_refused_with_the_valid_ones():
    with pytest.raises(PhoenixError, match="unknown Outer key.*turbo.*valid keys: inner, ks"):
        from_dict(Outer, {"turbo": 1})


def test_nested_dicts_become_nested_configs():
    assert from_dict(Outer, {"inner": {"size": 2}}).inner == Inner(False, 2)


def test_sentry_flags_carry_their_prefix():
    p = argparse.ArgumentParser()
    add_options(p, SentryConfig, prefix="sentry")
    args = p.parse_args(["--sentry-acceptance-floor", "0.7", "--no-sentry-profiling"])
    assert from_args(SentryConfig, args, prefix="sentry") == SentryConfig(acceptance_floor=0.7, profiling=False)


def test_bench_flags_cover_every_field_and_the_fallback():
    cfg = parse(BenchConfig, "--fallback", "--fallback-window", "3", "--arms", "0,4", "--draft", "none")
    assert cfg.fallback == FallbackConfig(enabled=True, window=3) and cfg.arms == [0, 4] and cfg.draft is None


def test_a_run_stored_before_fallback_was_one_dataclass_still_loads():
    old = {
        **asdict(BenchConfig()),
        "fallback": True,
        "fallback_window": 3,
        "fallback_margin": 0.1,
        "fallback_probe_every": 2,
    }
    del old["prompt_format"]
    assert stored({"bench": old}).fallback == FallbackConfig(enabled=True, window=3, margin=0.1, probe_every=2)
    assert stored({"bench": old}).prompt_format == "raw"  # how it was encoded then
    assert stored({"bench": asdict(BenchConfig())}) == BenchConfig()


def test_a_run_that_kept_its_resolved_settings_beside_bench_reads_them_as_its_own():
    config = {"bench": asdict(BenchConfig()), "device": "cpu", "dtype": "bfloat16", "prompt_format": "chat"}
    b = stored(config)
    assert (b.device, b.dtype, b.prompt_format) == ("cpu", "bfloat16", "chat")


def test_the_prompt_cap_holds_through_limit_per_column(tmp_path):
    from helpers import migrated

    from db.store import Store
    from engine.errors import PhoenixError

    store = Store(migrated(f"sqlite:///{tmp_path / 'cap.db'}"))
    from engine.bench.config import BenchConfig
    from engine.bench.setup import create_run

    cfg = BenchConfig(target="embedded", prompts="spec-bench-test", limit=None, limit_per_column=10, max_prompts=50)
    with pytest.raises(PhoenixError, match=r"^\d+ prompts would be queued \(--limit-per-column 10 .* the cap is 50"):
        create_run(store, cfg)
    assert store.list_runs() == []
