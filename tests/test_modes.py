"""The vocabulary's spec: the mode grammar, parsed once into a value object; every mode names its drafter; a
drafter proposes, a loop runs a request (phoenix or hf), an engine is a serving engine; a bandit's arm is not its k."""

from __future__ import annotations

import pytest

from engine.errors import PhoenixError
from engine.modes import K_MAX, Mode


@pytest.mark.parametrize(
    "text,kind,k,policy,granularity,drafter,loop",
    [
        ("target", "target", 0, None, None, "none", "phoenix"),
        ("model_4", "model", 4, None, None, "model", "phoenix"),
        ("fixed_4", "fixed", 4, None, None, "suffix", "phoenix"),  # an old run's: its drafter was the run's
        ("ngram_2", "ngram", 2, None, None, "ngram", "phoenix"),
        ("suffix_16", "suffix", 16, None, None, "suffix", "phoenix"),
        ("hf_8", "hf", 8, None, None, "model", "hf"),
        ("bandit", "bandit", None, None, None, "suffix", "phoenix"),
        ("bandit:ucb1", "bandit", None, "ucb1", None, "suffix", "phoenix"),
        ("bandit:model_based:pass", "bandit", None, "model_based", "pass", "suffix", "phoenix"),
        ("vllm_c16", "served", None, None, None, "vllm:as served", None),
        ("llamacpp_c2", "served", None, None, None, "llamacpp:as served", None),
        ("sglang_watch", "served", None, None, None, "sglang:as served", None),
        ("llamacpp-ngram-simple_c1", "served", None, None, None, "llamacpp:ngram-simple", None),
        ("llamacpp-none_c1", "served", None, None, None, "llamacpp:none", None),
    ],
)
def test_each_mode_parses_to_its_parts_and_names_its_drafter_and_loop(
    text, kind, k, policy, granularity, drafter, loop
):
    m = Mode.parse(text)
    assert (m.kind, m.k, m.policy, m.granularity) == (kind, k, policy, granularity)
    assert (m.drafter("suffix"), m.loop) == (drafter, loop)  # the run's --drafter is suffix here


def test_hf_modes_draft_with_prompt_lookup_when_there_is_no_draft_model():
    assert Mode.parse("hf_4").drafter("model", has_draft_model=False) == "ngram"


@pytest.mark.parametrize(
    "text,message",
    [
        ("turbo_4", "unknown mode 'turbo_4'"),
        ("fixed_0", "k must be in 1..16"),
        (f"fixed_{K_MAX + 1}", "k must be in 1..16"),
        ("bandit:UCB", "unknown mode"),
        ("", "unknown mode"),
    ],
)
def test_bad_modes_are_one_clear_error(text, message):
    with pytest.raises(PhoenixError, match=message):
        Mode.parse(text)
    assert Mode.of(text).kind == "other" and not Mode.of(text).is_bandit


@pytest.mark.parametrize(
    "text,fixed_arm,drafts_with_model,drafts_with_eagle3,label",
    [
        ("target", True, False, False, "target"),
        ("model_4", True, True, False, "model_4"),
        ("fixed_4", True, True, True, "fixed_4"),  # an old run's: whatever that run's --drafter was
        ("ngram_4", True, False, False, "ngram_4"),
        ("hf_4", False, False, False, "hf_4"),
        ("eagle3_3", True, False, True, "eagle3_3"),
        ("bandit", False, True, True, "bandit k=6"),
        ("llamacpp-ngram-simple_c1", False, False, False, "llamacpp-ngram-simple_c1 k=6"),
    ],
)
def test_what_analysis_asks_of_a_mode(text, fixed_arm, drafts_with_model, drafts_with_eagle3, label):
    m = Mode.parse(text)
    assert (m.is_fixed_arm, m.drafts_with("model"), m.drafts_with("eagle3")) == (
        fixed_arm,
        drafts_with_model,
        drafts_with_eagle3,
    )
    assert m.arm_label(6 if m.k is None else m.k) == label


@pytest.mark.parametrize(
    "text,run_drafter,named",
    [
        ("fixed_4", "model", "model_4"),
        ("fixed_3", "eagle3", "eagle3_3"),
        ("fixed_2", "ngram", "ngram_2"),
        ("ngram_04", "model", "ngram_4"),
        ("model_4", "eagle3", "model_4"),
        ("bandit:ucb1", "suffix", "bandit:ucb1"),
        ("llamacpp-none_c1", "model", "llamacpp-none_c1"),
    ],
)
def test_every_mode_is_shown_under_the_name_of_its_drafter_with_one_spelling_of_k(text, run_drafter, named):
    assert Mode.parse(text).named(run_drafter) == named


def test_a_served_modes_drafter_is_its_servers_speculation_never_one_of_phoenixs_drafters():
    from engine.modes import DRAFTERS

    for text in ("vllm_c16", "llamacpp-ngram-simple_c1", "llamacpp-none_c1", "sglang_watch"):
        m = Mode.parse(text)
        assert m.drafter("model") not in DRAFTERS and m.drafter("model").startswith(f"{m.server}:")
        assert m.loop is None  # a serving engine answered it, not one of Phoenix's loops


def test_a_run_stores_each_mode_under_its_drafters_name_and_refuses_two_spellings_of_one():
    from engine.bench.config import BenchConfig, validate

    cfg = validate(BenchConfig(draft="embedded", drafter="eagle3", modes=["target", "fixed_3", "ngram_08"]))
    assert cfg.modes == ["target", "eagle3_3", "ngram_8"]
    with pytest.raises(PhoenixError, match="repeats a mode") as err:
        validate(BenchConfig(draft="embedded", modes=["target", "ngram_4", "ngram_04"]))
    assert err.value.field == "modes"
    arms = validate(BenchConfig(modes=["bandit"], drafter="ngram", drafter_arms=["target", "fixed_4", "suffix_016"]))
    assert arms.drafter_arms == ["target", "ngram_4", "suffix_16"]


def test_limit_per_column_keeps_n_per_leaderboard_column_and_reads_its_old_name():
    from engine.bench.config import stored
    from engine.cli import build_parser

    args = build_parser().parse_args(["bench", "--limit-per-category", "3"])
    assert args.limit_per_column == "3"  # the old flag still works
    assert stored({"bench": {"limit_per_category": 3}}).limit_per_column == 3  # and old runs still open


@pytest.mark.parametrize("text", ["ngram_٤", "eagle3_３", "phoenix-auto_c٢"])
def test_a_mode_whose_digits_are_not_ascii_is_unknown_not_a_second_spelling(text):
    with pytest.raises(PhoenixError, match="unknown mode"):
        Mode.parse(text)
