"""Decoding: model loading and fetching, the hot path (`spec`: prefill, verify, speculative_step), the drafters (draft
model, n-gram, `suffix` trees, `eagle3`: the EAGLE-3 head, its checkpoint and its drafter, and the `hybrid` of the
suffix trees and the head), static caches,
`--compile` and `--freeze` (`compiled`), assisted generation (`hf_assisted`), and one request's `Decoder`.

Imports nothing from db, bench, observe, cli or app (tests/test_architecture.py holds it to that).
"""
