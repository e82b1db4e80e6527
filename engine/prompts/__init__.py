"""Prompt sets: HumanEval and its code edits, Spec-Bench (shipped here, with second turns), JSONL files; seeded splits,
and the check that no prompt is empty.

Imports only the vocabulary (tests/test_architecture.py holds it to that): decoding, training and runs all read
prompts from here.
"""
