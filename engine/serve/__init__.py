"""Serving engines: OpenAI-compatible clients for vLLM, SGLang and llama.cpp, their counters, recorded sweeps and
watches, servers side by side, and a managed llama-server. Phoenix's own server will live here too.
"""
