"""Serving: Phoenix's own OpenAI-compatible server (`api` over `service`: continuous batching in `scheduler`, one
forward verifying every row in `batch`, k tuned to the load in `tuner`) and its load sweep (`load`); clients for
vLLM, SGLang and llama.cpp, their counters, recorded sweeps and watches, llama.cpp servers side by side, a managed
llama-server, and Phoenix's drafts as GGUF for it (`gguf_export`).
"""
