"""The suffix drafter: its trees, its speculation rules, the run's global tree, and accounting when the draft
length varies pass by pass (a hand-checked case through decode, the store, the fit and Prometheus)."""

from __future__ import annotations

import math

import pytest
from prometheus_client import generate_latest

from engine.analysis.breakeven import fit_a, rates, survival
from engine.bench.request import make_record
from engine.decode.config import SuffixConfig
from engine.decode.decoder import Decoder
from engine.decode.drafters import Drafter
from engine.decode.loading import load_pair
from engine.decode.spec import generate
from engine.decode.suffix import SuffixDrafter, SuffixTree
from engine.errors import PhoenixError
from engine.observe.prometheus import Metrics
from engine.prompts.sets import Prompt


def walk(tree: SuffixTree, path: list[int]):
    node = tree.root
    for t in path:
        node = node.children[t]
    return node


def test_the_tree_counts_every_substring_up_to_its_depth_and_forgets_a_removed_sequence():
    tree = SuffixTree(3)
    tree.add([1, 2, 3, 1, 2, 4])
    assert tree.root.count == 6 and walk(tree, [1, 2]).count == 2
    assert {t: n.count for t, n in walk(tree, [1, 2]).children.items()} == {3: 1, 4: 1}
    assert 1 not in walk(tree, [2, 3, 1]).children  # depth 3: no substring of length 4
    tree.add([1, 2, 3, 1, 2, 4], -1)
    assert tree.root.count == 0 and tree.root.children == {}


def test_growing_a_tree_token_by_token_equals_adding_the_whole_sequence():
    seq = [5, 1, 2, 5, 1, 2, 5, 3, 1, 2]
    grown, whole = SuffixTree(4), SuffixTree(4)
    for t in seq:
        grown.append(t)
    whole.add(seq)

    def dump(node, prefix=()):
        out = {prefix: node.count}
        for t, child in node.children.items():
            out.update(dump(child, prefix + (t,)))
        return out

    assert dump(grown.root) == dump(whole.root)


CFG = SuffixConfig(max_tree_depth=8, min_prob=0.1)


@pytest.mark.parametrize(
    "text, pattern, k, cfg, expected",
    [
        ([1, 2, 3, 4, 5, 9, 1, 2, 3], [1, 2, 3], 4, CFG, [4, 5, 9]),  # match of 3 allows 3 tokens (factor 1.0)
        ([1, 2, 3, 4, 5, 9, 1, 2, 3], [1, 2, 3], 2, CFG, [4, 5]),  # capped by k
        (
            [1, 2, 3, 4, 5, 9, 7, 2, 3],
            [7, 2, 3],
            8,
            SuffixConfig(max_tree_depth=8, max_spec_factor=0.5),
            [4],
        ),  # 2 * 0.5
        ([1, 2, 3, 4, 5, 9, 1, 2, 3], [1, 2, 3], 8, SuffixConfig(max_tree_depth=8, max_spec_offset=2), [4, 5, 9, 1, 2]),
        (
            [1, 7, 1, 8, 1, 9, 1, 7],
            [1],
            4,
            SuffixConfig(max_tree_depth=8, min_prob=0.6),
            [],
        ),  # 1 -> 7 in 2 of 4: 0.5 < 0.6
        (
            [1, 7, 1, 7, 1, 9, 1],
            [1],
            4,
            SuffixConfig(max_tree_depth=8, min_prob=0.5),
            [7],
        ),  # 1 -> 7 in 2 of 3 continuations
        ([4, 4, 4], [6], 4, CFG, []),  # nothing matches
    ],
)
def test_speculation_follows_the_most_frequent_continuation_within_its_budget(text, pattern, k, cfg, expected):
    tree = SuffixTree(cfg.max_tree_depth)
    tree.add(text)
    assert tree.speculate(pattern, k, cfg)[0] == expected


def test_the_longest_match_wins_over_a_more_frequent_short_one():
    tree = SuffixTree(8)
    tree.add([3, 1, 2, 8, 0, 1, 2, 9, 5, 1, 2, 9, 6, 1, 2, 9])  # "1 2" -> 9 three times, "3 1 2" -> 8 once
    assert tree.speculate([3, 1, 2], 1, CFG)[0] == [8]  # one token: 9 scores 0.75 (3 of 4), 8 via the match of 3: 1.0
    tokens, score = tree.speculate([3, 1, 2], 3, CFG)
    assert tokens == [8, 0, 1] and score == pytest.approx(3.0)


def test_the_global_tree_holds_earlier_outputs_never_the_requests_own_and_evicts_the_oldest():
    d = SuffixDrafter(SuffixConfig(max_tree_depth=8, max_cached_requests=2))
    d.reset([1, 2])
    d.finish([1, 2], [10, 11, 12, 13])
    d.reset([7, 7])  # another prompt: the earlier output helps
    assert d.propose([7, 7, 10, 11], 2) == [12, 13]
    d.finish([7, 7], [20, 21, 22])
    d.reset([1, 2])  # the first prompt again: its own earlier output must not be visible
    assert d.propose([1, 2, 10, 11], 2) == []
    assert [key for key, _ in d._cached] == [(7, 7)]
    d.finish([1, 2], [30, 31, 32])
    d.finish([5], [40, 41, 42])  # a third output: the oldest (7, 7) leaves
    d.reset([9])
    assert d.propose([9, 20, 21], 1) == [] and d.propose([9, 20, 21, 40, 41], 1) == [42]
    assert 20 not in d.global_tree.root.children  # the evicted output is gone from the counts too


def test_without_the_global_tree_only_the_requests_own_text_is_used():
    d = SuffixDrafter(SuffixConfig(max_tree_depth=8, global_tree=False))
    d.reset([1, 2])
    d.finish([1, 2], [10, 11, 12, 13])
    d.reset([7, 7])
    assert d.propose([7, 7, 10, 11], 2) == [] and d.global_tree.root.count == 0
    assert d.propose([7, 7, 10, 11, 7, 7, 10], 2) == [11, 7]  # its own prompt and output


@pytest.mark.parametrize(
    "field, value, flag",
    [
        ("max_tree_depth", 0, "--suffix-max-tree-depth"),
        ("min_prob", 1.5, "--suffix-min-prob"),
        ("max_spec_factor", -1.0, "--suffix-max-spec-factor"),
        ("max_cached_requests", -1, "--suffix-max-cached-requests"),
    ],
)
def test_bad_suffix_settings_name_their_flag(field, value, flag):
    with pytest.raises(PhoenixError, match=flag):
        SuffixConfig(**{field: value}).validate()


class Scripted(Drafter):
    """Drafts the target's own next tokens, L per pass from a schedule, with one token spoilt where asked, so the
    accepted count of every pass is known in advance."""

    name = "scripted"

    def __init__(self, reference: list[int], prompt_len: int, schedule: list[tuple[int, int | None]]):
        self.reference, self.prompt_len, self.schedule, self.passes = reference, prompt_len, schedule, 0

    def reset(self, prompt_ids):
        self.passes = 0

    def propose(self, seq, k):
        length, wrong = self.schedule[self.passes % len(self.schedule)]
        length = min(length, k)
        self.passes += 1
        start = len(seq) - self.prompt_len
        out = list(self.reference[start : start + length])
        if wrong is not None and wrong < len(out):
            out[wrong] = (out[wrong] + 1) % 50  # any other id is rejected by greedy verification
        return out


def test_varying_draft_lengths_keep_counts_fit_and_prometheus_exact_on_a_hand_checked_case(tiny_dirs):
    pair = load_pair(tiny_dirs["qwen3"]["target"], None, "cpu", "float32")
    dec = Decoder(pair)
    ids = dec.encode("def f(x):\n    return")
    reference = dec.run(ids, 0, 60).output_ids
    assert len(reference) == 60
    # a cycle of passes (drafted, accepted): (2, 2) (0, 0) (3, 1: the second spoilt) (1, 1) -> 3 + 1 + 2 + 2 tokens;
    # the prefill's token and 4 cycles make 33
    schedule = [(2, None), (0, None), (3, 1), (1, None)]
    stats = generate(pair.target, Scripted(reference, len(ids), schedule), ids, 3, 33, dec.eos_id)
    assert stats.output_ids == reference[:33] and stats.passes == 16
    # by hand, per cycle: proposed [3, 2, 1], accepted [3, 1, 0], reached [3, 2, 0]; 3 drafts, 6 drafted, 4 accepted
    assert stats.per_position_proposed == [12, 8, 4]
    assert stats.per_position_accepted == [12, 4, 0]
    assert stats.per_position_reached == [12, 8, 0]
    assert (stats.proposed, stats.accepted) == (24, 16)
    uncond, cond = rates([12, 8, 4], [12, 4, 0], [12, 8, 0])
    assert uncond == pytest.approx([1.0, 1 / 3, 0.0])  # vLLM's: positions never proposed count as rejected
    assert cond[:2] == pytest.approx([1.0, 0.5]) and math.isnan(cond[2])  # position 3 was reached by no pass
    assert survival([12, 8, 4], [12, 4, 0], [12, 8, 0])[:2] == pytest.approx([1.0, 0.5])
    # without 'reached', accepted_{i-1} stands in for it: 12 passes accepted position 1, only 8 proposed position 2
    assert rates([12, 8, 4], [12, 4, 0])[1][1] == pytest.approx(0.5)  # min(12, 8) happens to be right here ...
    assert rates([12, 8, 4], [12, 4, 2], [12, 8, 2])[1][2] == pytest.approx(1.0)  # ... and here it is not:
    assert rates([12, 8, 4], [12, 4, 2])[1][2] == pytest.approx(0.5)  # 2 / min(4, 4) undercounts
    rec = make_record(1, 0, "suffix_3", 3, Prompt("p", "x"), stats, "", False, "0" * 32)
    assert [(q.proposed, q.accepted, q.reached) for q in rec.positions] == [(12, 12, 12), (8, 4, 8), (4, 0, 0)]
    m = Metrics()
    m.observe(rec, "tgt")
    body = generate_latest(m.registry).decode()
    assert 'phoenix:spec_decode_num_drafts_total{engine="0",model_name="tgt"} 12.0' in body  # passes that drafted
    assert 'phoenix:spec_decode_num_draft_tokens_total{engine="0",model_name="tgt"} 24.0' in body
    assert 'phoenix:spec_decode_num_accepted_tokens_total{engine="0",model_name="tgt"} 16.0' in body
    for i, n in enumerate([12, 4, 0]):
        assert (
            "phoenix:spec_decode_num_accepted_tokens_per_pos_total"
            f'{{engine="0",model_name="tgt",position="{i}"}} {float(n)}' in body
        )
    assert fit_a([12, 8, 4], [12, 4, 0], [12, 8, 0]) == pytest.approx(fit_a([12, 8], [12, 4], [12, 8]))


@pytest.mark.parametrize("field", ["max_spec_factor", "max_spec_offset"])
def test_an_infinite_draft_budget_from_a_stored_or_form_config_is_refused(field):
    from engine.decode.config import SuffixConfig
    from engine.errors import PhoenixError

    with pytest.raises(PhoenixError, match="finite numbers >= 0") as err:
        SuffixConfig(**{field: float("inf")}).validate()
    assert err.value.field == "suffix.max_spec_factor"
