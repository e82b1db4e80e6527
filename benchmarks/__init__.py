"""Benchmarks: one script per question, each writing JSON to benchmarks/results/."""
