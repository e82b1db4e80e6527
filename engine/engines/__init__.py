"""Other serving engines, measured on Phoenix's prompts: one OpenAI client (`client`: whole and streamed requests,
bounded in time and size) and the counters every engine exports (`counters`); a managed llama.cpp `llama-server`
(`llamacpp`, built here by `llamacpp_build`, drafting with Phoenix's drafts written as GGUF by `gguf_export`) and a
managed vLLM (`vllm`: its own venv, started with any speculation Phoenix can express; `vllm_table` learns its
per-batch-size k table); the managed servers a measurement starts and stops (`fleet`); and the measurements:
a concurrency sweep and a counter watch (`record`), servers side by side (`side_by_side`), and the load sweep in
the field's terms (`load`, with arrivals and goodput in `arrivals`). Phoenix's own server is `engine/serve/`.
"""
