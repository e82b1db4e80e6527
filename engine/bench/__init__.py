"""A benchmark run: its config and validation (`config`), the forward path `--fast` picks from this CPU's measurement
(`fast`), its row and provenance (`setup`), one request (`request`), a mode's prompts decoded together through the
server's engine core at `--concurrency N` (`batched`), a whole run (`run`), the `recorder` (the one write policy for
a run's rows, the lab's and the server's, and the lab's batched writer), and its results (`report`, Spec-Bench's
`leaderboard`).
"""
