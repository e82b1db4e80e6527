"""Other serving engines, measured on Phoenix's prompts: one OpenAI client (`client`: whole and streamed requests,
bounded in time and size), the counters every engine exports and vLLM's per-request counts (`counters`), and one
place that turns any engine's answer into a request row (`rows`). The servers Phoenix manages share one process
lifecycle (`process`): llama.cpp's `llama-server` (`llamacpp`, built here by `llamacpp_build`, drafting with
Phoenix's drafts written as GGUF by `gguf_export`) and vLLM (`vllm`: its own venv, started with any speculation
Phoenix can express; `vllm_table` learns its per-batch-size k table from a load sweep; `vllm_export` converts and
validates Phoenix's EAGLE-3 head with vLLM's `speculators`). A measurement starts and
stops its managed servers through `managed`: a concurrency sweep and a counter watch (`record`), servers side by side
(`side_by_side`), the load sweep in the field's terms (`load`, with arrivals, TTFT, TPOT and goodput in `arrivals`,
and a shared system prompt and sampling in `workload`), and Phoenix's load client checked against vLLM's own
(`crosscheck`). Phoenix's own servers as replicas behind `vllm-router` (`replicas`: `fleet start|stop`), and
the fleet plan priced from one replica's measured steps (`planning`: `fleet plan`). Their
settings are in `config` (no store, no client). Phoenix's own server is `engine/serve/`.
"""
