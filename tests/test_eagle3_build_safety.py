"""The head build's caches are read without running anything: a planted pickle is refused in one line, and a
cache the build wrote (Samples of tensors) is read back whole."""

from __future__ import annotations

import os

import pytest
import torch

from engine.errors import PhoenixError
from engine.train.eagle3 import Sample
from engine.train.eagle3_build import load_cache


class Planted:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):  # what a planted cache would run on load
        return (os.makedirs, (self.marker,))


def test_a_planted_pickle_in_the_answers_cache_is_refused_and_never_runs(tmp_path):
    path = tmp_path / "answers.pt"
    marker = tmp_path / "it-ran"
    torch.save([Planted(str(marker))], path)
    with pytest.raises(PhoenixError, match="refused unread: delete it"):
        load_cache(path)
    assert not marker.exists()


def test_a_cache_the_build_wrote_is_read_back(tmp_path):
    path = tmp_path / "answers.pt"
    samples = [
        Sample(torch.arange(5), torch.zeros(4, 6), torch.ones(4, 2), 3),
        Sample(torch.arange(3), torch.zeros(2, 6), torch.ones(2, 2), 1, False),
    ]
    torch.save(samples, path)
    back = load_cache(path)
    assert (
        [s.prompt_len for s in back] == [3, 1] and torch.equal(back[0].tokens, samples[0].tokens) and not back[1].greedy
    )
