"""The hybrid drafter (suffix trees or the EAGLE-3 head, pass by pass) and drafting that stops when unsure: exact
through Phoenix's loop on every architecture the tests cover, static cache included, and counted per source."""

from __future__ import annotations

import pytest
import torch
from test_eagle3 import random_head

from engine.decode.config import HybridConfig, SuffixConfig
from engine.decode.decoder import Decoder
from engine.decode.eagle3 import save_head
from engine.decode.loading import load_pair
from engine.errors import PhoenixError
from engine.modes import Mode

# the third repeats itself, so the suffix trees find confident matches; the first two mostly leave it to the head
PROMPTS = [
    'def add(a, b):\n    """Return a + b."""\n',
    "import os\n\nclass Config:\n    def __init__(self, path):\n        self.path = path\n",
    "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(i)\nfor i in range(10):\n",
]
ARCHS = ["llama", pytest.param("qwen3", marks=pytest.mark.e2e), pytest.param("mistral", marks=pytest.mark.e2e)]


@pytest.fixture(scope="module")
def paths(tiny_dirs, tmp_path_factory):
    """Per architecture: (target, a random head over the target's frequent greedy tokens, the near-copy draft)."""
    root = tmp_path_factory.mktemp("hybrid")
    out = {}
    for arch in ("llama", "qwen3", "mistral"):
        d = tiny_dirs[arch]
        dec = Decoder(load_pair(d["target"], None, "cpu", "float32"))
        counts: dict[int, int] = {}
        for prompt in PROMPTS:
            for tok in dec.run(dec.encode(prompt), 0, 40).output_ids:
                counts[tok] = counts.get(tok, 0) + 1
        vocab = sorted(sorted(counts, key=lambda t: -counts[t])[:3])
        save_head(random_head(dec.pair.target, vocab), root / arch, torch.float32)
        out[arch] = (d["target"], str(root / arch), d["near"])
    return out


def references(dec: Decoder, n: int = 40) -> list[list[int]]:
    return [dec.run(dec.encode(p), 0, n, timed=False).output_ids for p in PROMPTS]


def totals(per_source: dict) -> tuple[int, int, int]:
    return (
        sum(t["passes"] for t in per_source.values()),
        sum(sum(t["proposed"]) for t in per_source.values()),
        sum(sum(t["accepted"]) for t in per_source.values()),
    )


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("arch", ARCHS)
def test_hybrid_drafting_equals_target_only_and_counts_each_source_apart(paths, arch, cache):
    target, head, _ = paths[arch]
    dec = Decoder(load_pair(target, head, "cpu", "float32"), cache=cache)
    dec.start_run(SuffixConfig(), HybridConfig(min_score=0.5, head_k=3))
    refs = references(dec)
    sources: set[str] = set()
    for _ in range(2):  # the second round drafts from the global tree too (the first round's outputs)
        for prompt, reference in zip(PROMPTS, refs):
            for k in (2, 8, 16):
                stats = dec.run(dec.encode(prompt), k, 40, "hybrid")
                assert stats.output_ids == reference, f"{arch} hybrid_{k} diverged"
                drafting = sum(1 for n in stats.k_per_pass if n)
                assert stats.per_source is not None
                assert totals(stats.per_source) == (drafting, stats.proposed, stats.accepted)
                assert max(len(t["proposed"]) for t in stats.per_source.values()) <= k
                head_lengths = stats.per_source.get("eagle3", {}).get("proposed", [])
                assert len(head_lengths) <= 3  # the head drafts at most head_k, whatever the mode's k
                sources |= set(stats.per_source)
    assert sources == {"suffix", "eagle3"}  # both sources drafted, so both paths ran


def test_the_hybrid_is_the_head_where_the_trees_are_never_sure_and_the_trees_where_they_always_are(paths):
    target, head, _ = paths["llama"]
    dec = Decoder(load_pair(target, head, "cpu", "float32"))
    ids = dec.encode(PROMPTS[2])
    dec.start_run(SuffixConfig(), HybridConfig(min_score=1e9, head_k=4))
    as_head, eagle3 = dec.run(ids, 4, 40, "hybrid"), dec.run(ids, 4, 40, "eagle3")
    assert set(as_head.per_source or {}) == {"eagle3"}
    assert (as_head.k_per_pass, as_head.per_position_accepted) == (eagle3.k_per_pass, eagle3.per_position_accepted)
    dec.start_run(SuffixConfig(global_tree=False), HybridConfig(min_score=0.0))
    as_trees, suffix = dec.run(ids, 8, 40, "hybrid"), dec.run(ids, 8, 40, "suffix")
    # score 0 takes any draft the trees have; a pass they have none for goes to the head
    tree_passes = (as_trees.per_source or {}).get("suffix", {}).get("passes", 0)
    assert tree_passes >= sum(1 for n in suffix.k_per_pass if n) - 2 and tree_passes > 0


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("drafter", ["eagle3", "model", "hybrid"])
def test_drafting_that_stops_when_unsure_equals_target_only_and_drafts_less(paths, arch, cache, drafter):
    target, head, near = paths[arch]
    dec = Decoder(load_pair(target, near if drafter == "model" else head, "cpu", "float32"), cache=cache)
    dec.start_run(SuffixConfig(), HybridConfig(min_score=1e9, head_k=8))  # the hybrid's head drafts every pass
    stopped = 0
    for prompt, reference in zip(PROMPTS, references(dec)):
        ids = dec.encode(prompt)
        full = dec.run(ids, 8, 40, drafter)
        unsure = dec.run(ids, 8, 40, drafter, confidence=0.99)
        assert unsure.output_ids == reference == full.output_ids, f"{arch} {drafter}-conf_8 diverged"
        assert unsure.proposed <= full.proposed + 8  # drafts shorter or equal (one pass more may shift the tail)
        stopped += sum(1 for n in unsure.k_per_pass[:-2] if 0 < n < 8)
    assert stopped > 0  # the threshold stopped drafts before k, so the stopping path ran


def test_a_request_without_a_threshold_drafts_k_again_after_one_with_it(paths):
    target, head, _ = paths["llama"]
    dec = Decoder(load_pair(target, head, "cpu", "float32"))
    ids = dec.encode(PROMPTS[0])
    before = dec.run(ids, 4, 40, "eagle3")
    dec.run(ids, 4, 40, "eagle3", confidence=0.99)
    assert dec.run(ids, 4, 40, "eagle3").k_per_pass == before.k_per_pass


def test_a_drafter_without_probabilities_refuses_a_threshold_in_one_line(paths):
    target, head, _ = paths["llama"]
    dec = Decoder(load_pair(target, head, "cpu", "float32"))
    with pytest.raises(PhoenixError, match="no probabilities"):
        dec.run(dec.encode(PROMPTS[0]), 4, 10, "ngram", confidence=0.5)


@pytest.mark.parametrize(
    "text,kind,k,confident",
    [
        ("hybrid_8", "hybrid", 8, False),
        ("eagle3-conf_6", "eagle3", 6, True),
        ("model-conf_4", "model", 4, True),
        ("hybrid-conf_16", "hybrid", 16, True),
    ],
)
def test_hybrid_and_confident_modes_parse_into_their_drafter_and_k(text, kind, k, confident):
    mode = Mode.parse(text)
    assert (mode.kind, mode.k, mode.confident, mode.drafter("model")) == (kind, k, confident, kind)
    assert mode.is_fixed_arm and mode.named("model") == text and mode.needs_draft_model("model")


@pytest.mark.parametrize("text", ["ngram-conf_4", "suffix-conf_8", "target-conf_1", "hybrid-conf_0"])
def test_a_confident_mode_of_a_drafter_without_probabilities_is_one_clear_error(text):
    with pytest.raises(PhoenixError, match="unknown mode|stops when unsure|k must be"):
        Mode.parse(text)
