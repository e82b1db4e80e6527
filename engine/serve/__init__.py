"""Phoenix's own OpenAI-compatible server: `api` over `service` (the engine core's scheduler on its own loop, reached
through the engine client, engine.decode.client; its step records and finished requests written by the recorder
thread through engine.record, which retries, holds and spills rather than drop one), request bodies read strictly
(`parse`), responses, chunks, logprobs and vLLM's per-request metrics (`render`), k tuned to the load in `tuner`,
streams detokenized incrementally and stop strings (`detokenize`). Clients and managers of other engines, and the
load sweep that measures any server, live in `engine/engines/`.
"""
