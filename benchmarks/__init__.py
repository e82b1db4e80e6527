"""What is not a run: the hardware floor (`limits`), dashboard timing (`dashboard`), recording overhead (`overhead`),
the decode profile, the GPU check; `report` writes docs/results.md from benchmarks/results.db.
"""
