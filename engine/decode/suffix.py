"""Suffix decoding (SuffixDecoding, arXiv 2411.04975; ArcticInference's suffix_decoding): a model-free drafter.

Two suffix trees of depth ``max_tree_depth``: one over the current request's prompt and accepted output, grown as
tokens are accepted, and one over the outputs of earlier requests in the run (at most ``max_cached_requests``,
first in, first out). Each pass matches the longest suffix of the text that the trees hold (every match length
down to one token is tried), then walks the most frequent continuation while its empirical probability (product
of child count / parent count) stays at or above ``min_prob``. The draft is at most
``match_len * max_spec_factor + max_spec_offset`` tokens, capped by k, and the candidate with the highest score
(the sum of its tokens' probabilities) wins, across match lengths and across the two trees.

The trees here are plain tries of depth ``max_tree_depth`` (ArcticInference compresses single-child chains; the
counts and so the drafts are the same). A request never sees its own text: earlier outputs of the same prompt
leave the global tree when that prompt is decoded again, and a request's output joins it only when it ends.
"""

from __future__ import annotations

from collections import deque

from engine.decode.config import SuffixConfig
from engine.decode.drafters import Drafter


class _Node:
    __slots__ = ("count", "children")

    def __init__(self):
        self.count = 0
        self.children: dict[int, _Node] = {}


class SuffixTree:
    """Counts of every substring of length <= depth; ``count`` of a node = occurrences of the path to it."""

    def __init__(self, depth: int):
        self.depth = depth
        self.root = _Node()
        self.active: list[_Node] = []  # nodes of the suffixes that end at the last appended token, longest first

    def append(self, token: int) -> None:
        """Extend the sequence this tree is growing by one token (the request's own tree)."""
        self.root.count += 1
        grown = []
        for node in [*self.active[-(self.depth - 1) :], self.root] if self.depth > 1 else [self.root]:
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = _Node()
            child.count += 1
            grown.append(child)
        self.active = grown

    def add(self, tokens: list[int], sign: int = 1) -> None:
        """Add (or with sign=-1 remove) every suffix of a whole sequence (the global tree's entries)."""
        for start in range(len(tokens)):
            node = self.root
            node.count += sign
            for token in tokens[start : start + self.depth]:
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node()
                child.count += sign
                if child.count == 0:
                    del node.children[token]
                    break
                node = child

    def matches(self, pattern: list[int]) -> list[tuple[_Node, int]]:
        """(node, match length) for every suffix of ``pattern`` the tree holds, longest first."""
        out = []
        for start in range(max(0, len(pattern) - self.depth), len(pattern)):
            node: _Node | None = self.root
            for token in pattern[start:]:
                node = node.children.get(token) if node is not None else None
                if node is None:
                    break
            if node is not None:
                out.append((node, len(pattern) - start))
        return out

    def speculate(self, pattern: list[int], k: int, cfg: SuffixConfig) -> tuple[list[int], float]:
        """The best draft for text ending in ``pattern``: (tokens, score)."""
        return best_draft(self.matches(pattern), k, cfg)

    def step(self, matched: list[tuple[_Node, int]], token: int) -> list[tuple[_Node, int]]:
        """The matches after one more token of the text, from the matches before it: O(depth), no walk from the root."""
        out = [
            (child, n + 1) for node, n in matched if n < self.depth and (child := node.children.get(token)) is not None
        ]
        child = self.root.children.get(token)
        return out + [(child, 1)] if child is not None else out


def best_draft(matches: list[tuple[_Node, int]], k: int, cfg: SuffixConfig) -> tuple[list[int], float]:
    """ArcticInference's rule over the matches (longest first): budget min(k, match_len * factor + offset), the most
    frequent path within it, the highest score (sum of path probabilities) wins."""
    best, best_score = [], 0.0
    for node, match_len in matches:
        budget = max(0, min(k, int(match_len * cfg.max_spec_factor + cfg.max_spec_offset + 1e-6)))
        if best_score >= budget:  # a score is at most its token count, and shorter matches get smaller budgets
            break
        tokens, score = _path(node, budget, cfg.min_prob)
        if score > best_score:
            best, best_score = tokens, score
    return best, best_score


def _path(node: _Node, budget: int, min_prob: float) -> tuple[list[int], float]:
    tokens: list[int] = []
    prob, score = 1.0, 0.0
    # node.count > 0: a match held across requests (a fork's) may sit in a branch another request's output just
    # left; an emptied branch proposes nothing
    while len(tokens) < budget and node.children and node.count > 0:
        token, child = max(node.children.items(), key=lambda kv: kv[1].count)
        prob *= child.count / node.count
        if prob < min_prob:
            break
        tokens.append(token)
        score += prob
        node = child
    return tokens, score


class SuffixDrafter(Drafter):
    """The drafter interface (propose, with the reset and finish hooks) over a request tree and the run's global
    tree. The trees only ever hold accepted tokens (propose feeds them from the context), so nothing rolls back."""

    name = "suffix"

    def __init__(self, cfg: SuffixConfig | None = None):
        self.cfg = cfg or SuffixConfig()
        self.global_tree = SuffixTree(self.cfg.max_tree_depth)
        self._cached: deque[tuple[tuple[int, ...], list[int]]] = deque()  # (prompt key, output) in arrival order
        self.local = SuffixTree(self.cfg.max_tree_depth)  # replaced per request in reset
        self._global_matches: list = []  # (node, length) of the text's suffixes in the global tree, kept per token
        self._fed = 0
        self._key: tuple[int, ...] = ()

    def reset(self, prompt_ids: list[int]) -> None:
        self._key = tuple(prompt_ids)
        if any(key == self._key for key, _ in self._cached):  # this prompt's earlier output would be its own answer
            kept: deque[tuple[tuple[int, ...], list[int]]] = deque()
            for key, output in self._cached:
                if key == self._key:
                    self.global_tree.add(output, -1)
                else:
                    kept.append((key, output))
            self._cached.clear()  # in place: forks share the deque
            self._cached.extend(kept)
        self.local = SuffixTree(self.cfg.max_tree_depth)
        for token in prompt_ids:
            self.local.append(token)
        self._fed = len(prompt_ids)
        # matches depend only on the last max_tree_depth tokens, so the global tree is walked for those alone
        use_global = self.cfg.global_tree and self._cached
        self._global_matches = self.global_tree.matches(prompt_ids[-self.cfg.max_tree_depth :]) if use_global else []

    def fork(self) -> SuffixDrafter:
        """A drafter for another request decoded at the same time: its own request tree, this one's global tree
        (what every finished request taught, shared)."""
        other = SuffixDrafter(self.cfg)
        other.global_tree, other._cached = self.global_tree, self._cached
        return other

    def _feed(self, tokens: list[int]) -> None:
        use_global = self.cfg.global_tree and self._cached
        for token in tokens:
            self.local.append(token)
            if use_global:
                self._global_matches = self.global_tree.step(self._global_matches, token)
        self._fed += len(tokens)

    def propose(self, context: list[int], k: int) -> list[int]:
        return self.speculate(context, k)[0]

    def speculate(self, context: list[int], k: int) -> tuple[list[int], float]:
        """The draft and its score (the sum of its tokens' path probabilities: the tokens the trees expect to be
        accepted), the better of the request tree's and the global tree's."""
        self._feed(context[self._fed :])
        # the request tree's active nodes are exactly the matches of the text's suffixes, longest first
        depth = len(self.local.active)
        tokens, score = best_draft([(node, depth - i) for i, node in enumerate(self.local.active)], k, self.cfg)
        if self._global_matches:
            other, other_score = best_draft(self._global_matches, k, self.cfg)
            if other_score > score:
                tokens, score = other, other_score
        return tokens, score

    def finish(self, prompt_ids: list[int], output_ids: list[int]) -> None:
        """The request ended: its output joins the global tree; the oldest leave past max_cached_requests."""
        if not (self.cfg.global_tree and self.cfg.max_cached_requests and output_ids):
            return
        self._cached.append((tuple(prompt_ids), list(output_ids)))
        self.global_tree.add(list(output_ids))
        while len(self._cached) > self.cfg.max_cached_requests:
            _, old = self._cached.popleft()
            self.global_tree.add(old, -1)
