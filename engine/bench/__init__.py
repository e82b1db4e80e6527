"""Benchmark runs: config, one request, a whole run, the batched recorder, the background worker."""
