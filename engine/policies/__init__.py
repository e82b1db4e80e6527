"""Draft-length policies behind one Protocol (`types.Policy`): bandits over k or over (drafter, k) arms, model-based,
EMA, contextual, the per-pass and fallback wrappers (`registry.make_policy`). Pure and seeded: no I/O, no clock.

Imports nothing from db, bench, observe, cli or app (tests/test_architecture.py holds it to that).
"""
