"""Decoding: model loading, prompts, the speculative loop, drafters, and one request's Decoder.

Imports nothing from db, bench, observe, cli or app (tests/test_architecture.py holds it to that).
"""
