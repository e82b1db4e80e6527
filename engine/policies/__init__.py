"""Draft-length policies behind one Protocol (types.Policy). Pure and seeded: no I/O, no clock.

Imports nothing from db, bench, observe, cli or app (tests/test_architecture.py holds it to that).
"""
