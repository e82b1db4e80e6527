"""The mode grammar, parsed once into a value object."""

from __future__ import annotations

import pytest

from engine.errors import PhoenixError
from engine.modes import K_MAX, Mode


@pytest.mark.parametrize(
    "text,kind,k,policy,granularity,drafter,engine",
    [
        ("target", "target", 0, None, None, "none", "phoenix"),
        ("fixed_4", "fixed", 4, None, None, "suffix", "phoenix"),
        ("ngram_2", "ngram", 2, None, None, "ngram", "phoenix"),
        ("suffix_16", "suffix", 16, None, None, "suffix", "phoenix"),
        ("hf_8", "hf", 8, None, None, "model", "hf"),
        ("bandit", "bandit", None, None, None, "suffix", "phoenix"),
        ("bandit:ucb1", "bandit", None, "ucb1", None, "suffix", "phoenix"),
        ("bandit:model_based:pass", "bandit", None, "model_based", "pass", "suffix", "phoenix"),
        ("vllm_c16", "served", None, None, None, "server", "vllm"),
        ("llamacpp_c2", "served", None, None, None, "server", "llamacpp"),
        ("sglang_watch", "served", None, None, None, "server", "sglang"),
        ("llamacpp-ngram-simple_c1", "served", None, None, None, "ngram-simple", "llamacpp"),
        ("llamacpp-none_c1", "served", None, None, None, "none", "llamacpp"),
    ],
)
def test_each_mode_parses_to_its_parts_and_names_its_drafter_and_engine(
    text, kind, k, policy, granularity, drafter, engine
):
    m = Mode.parse(text)
    assert (m.kind, m.k, m.policy, m.granularity) == (kind, k, policy, granularity)
    assert (m.drafter("suffix"), m.engine) == (drafter, engine)  # the run's --drafter is suffix here


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
    "text,fixed_arm,uses_drafter,label",
    [
        ("target", True, False, "target"),
        ("fixed_4", True, True, "fixed_4"),
        ("ngram_4", True, False, "ngram_4"),
        ("hf_4", False, False, "hf_4"),
        ("eagle3_3", True, False, "eagle3_3"),
        ("bandit", False, True, "bandit k=6"),
    ],
)
def test_what_analysis_asks_of_a_mode(text, fixed_arm, uses_drafter, label):
    m = Mode.parse(text)
    assert (m.is_fixed_arm, m.uses_drafter, m.arm_label(6 if m.k is None else m.k)) == (fixed_arm, uses_drafter, label)
