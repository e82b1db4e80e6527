"""A benchmark run: its config and validation (`config`), the forward path `--fast` picks from this CPU's measurement
(`fast`), its row and provenance (`setup`), one request (`request`), a mode's prompts decoded together through the
server's engine core and its engine client at `--concurrency N` (`batched`), a whole run (`run`), and its results
(`report`, Spec-Bench's `leaderboard`). Its rows are built and written by engine.record, as the server's are.
"""
