"""Phoenix's own OpenAI-compatible server: `api` over `service` (the engine core's scheduler on its own loop, its
step records and finished requests turned into rows by a recorder thread), k tuned to the load in `tuner`, streams
detokenized incrementally (`detokenize`). Clients and managers of other engines, and the load sweep that measures
any server, live in `engine/engines/`.
"""
