"""vLLM as the serving engine: an OpenAI-compatible client and its recorded sweeps and watches."""
