"""``engines load --system-prompt FILE``: one shared prefix before every prompt (a deployment's system prompt), sent
as the system message through the chat template or as the start of a raw prompt, and checked before anything runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.engines.config import LoadConfig
from engine.engines.load import variants_of
from engine.engines.workload import as_sent, system_text, with_system
from engine.errors import PhoenixError


def test_the_system_prompt_goes_before_every_prompt_in_both_doors(tmp_path):
    f = tmp_path / "system.txt"
    f.write_text("You are terse.")
    chat = replace(LoadConfig(), system_prompt=str(f))
    text, extra = with_system(chat, "What is 2 + 2?", {"return_token_ids": True})
    assert text == "What is 2 + 2?" and extra == {
        "return_token_ids": True,
        "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2 + 2?"}],
    }
    raw = replace(chat, chat=False)
    assert with_system(raw, "def f():", None) == ("You are terse.\n\ndef f():", None)
    assert with_system(LoadConfig(), "x", None) == ("x", None)  # no file: the prompt as it is


def test_a_system_prompt_file_that_cannot_serve_is_one_line_before_the_sweep(tmp_path):
    empty, big, binary = tmp_path / "empty.txt", tmp_path / "big.txt", tmp_path / "bin.txt"
    empty.write_text("  \n")
    big.write_text("x" * (65 << 10))
    binary.write_bytes(b"\xff\xfe\x00")
    for path, words in (
        (tmp_path / "missing.txt", "cannot read it"),
        (empty, "must hold some text"),
        (big, "must hold some text"),
        (binary, "cannot read it"),
    ):
        system_text.cache_clear()
        with pytest.raises(PhoenixError, match=words) as exc:
            variants_of(replace(LoadConfig(), system_prompt=str(path)))
        assert exc.value.field == "system_prompt"


def test_a_sampled_sweep_sends_each_prompt_one_seed_in_every_variant():
    from engine.prompts.sets import Prompt

    cfg = replace(LoadConfig(), temperature=0.7, seed=3)
    a, b = Prompt("p1", "x"), Prompt("p2", "y")
    _, ea = as_sent(cfg, a, None)
    _, ea2 = as_sent(cfg, a, {"return_token_ids": True})
    _, eb = as_sent(cfg, b, None)
    assert ea is not None and ea2 is not None and eb is not None
    assert ea["temperature"] == 0.7 and ea["seed"] == ea2["seed"] != eb["seed"] and ea2["return_token_ids"]
    assert as_sent(LoadConfig(), a, None) == ("x", None)  # greedy: the body as before
    with pytest.raises(PhoenixError, match="--temperature must be in 0..2"):
        variants_of(replace(LoadConfig(), temperature=-1.0))


def test_several_tenants_give_each_prompt_its_own_deployments_prefix_the_same_in_every_variant(tmp_path):
    """--tenants N: N system prompts that differ from their first line, each prompt always its tenant's (the
    workload on which a cache-aware router keeps a replica's prefix cache warm)."""
    from engine.prompts.sets import Prompt

    f = tmp_path / "system.txt"
    f.write_text("You are terse.")
    cfg = replace(LoadConfig(), system_prompt=str(f), tenants=3, chat=False)
    prompts = [Prompt(f"p{i}", f"def f{i}():") for i in range(30)]
    sent = {p.id: as_sent(cfg, p, None)[0] for p in prompts}
    firsts = {text.split("\n", 1)[0] for text in sent.values()}
    assert firsts == {f"You serve deployment {t} of 3." for t in (1, 2, 3)}
    assert all(text.endswith(f"You are terse.\n\n{p.text}") for p, text in zip(prompts, sent.values()))
    assert sent == {p.id: as_sent(cfg, p, None)[0] for p in prompts}  # the same tenant every time
    for bad in (0, 2000):
        with pytest.raises(PhoenixError, match="--tenants must be in 1..1024"):
            variants_of(replace(cfg, tenants=bad))
    with pytest.raises(PhoenixError, match="come with --system-prompt"):
        variants_of(replace(LoadConfig(), tenants=2))
