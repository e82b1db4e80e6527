"""A stand-in for a vLLM OpenAI-compatible server: /v1/completions and a /metrics body in
vLLM's exposition format (tests/fixtures/vllm/PROVENANCE.md says what it is and is not).

Each completion advances the spec-decode counters as a server drafting k=4 tokens per
pass would, with per-position acceptance that falls with concurrency (as it does when
a real server disables or shortens speculation under load)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TEMPLATE = (Path(__file__).parent / "fixtures" / "vllm" / "metrics.prom.tmpl").read_text()
K = 4


class FakeVllm:
    def __init__(
        self,
        model: str = "Qwen/Qwen3-1.7B",
        tokens: int = 24,
        delay_s: float = 0.01,
        max_model_len: int | None = None,
        spec: bool = True,
        prefix: str = "",
    ):
        self.model, self.tokens, self.delay_s = model, tokens, delay_s
        self.max_model_len = max_model_len  # in prompt words + max_tokens, as a real server counts tokens
        self.spec, self.prefix = (
            spec,
            prefix,
        )  # spec=False: started without a speculative config; prefix "ray_": Ray Serve
        self.bodies: list[dict] = []
        self.dies_after: int | None = None  # answers before it fails every request, /metrics too (a dying server)
        self.lock = threading.Lock()
        self.running = 0
        self.c = {
            "drafts": 0,
            "draft_tokens": 0,
            "accepted": 0,
            "generation_tokens": 0,
            "requests": 0,
            "latency_sum": 0.0,
            "per_pos": [0] * K,
        }
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if fake.dead():
                    return self._send(503, b"gone", "text/plain")
                if self.path != "/metrics":
                    return self._send(404, b"not found", "text/plain")
                self._send(200, fake.render().encode(), "text/plain; version=0.0.4")

            def do_POST(self):
                if self.path != "/v1/completions":
                    return self._send(404, b"{}", "application/json")
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if fake.dead():
                    return self._send(503, b"{}", "application/json")
                fake.bodies.append(body)
                if (
                    fake.max_model_len
                    and len(body.get("prompt", "").split()) + body.get("max_tokens", 16) > fake.max_model_len
                ):
                    return self._send(
                        400,
                        json.dumps(
                            {"error": f"This model's maximum context length is {fake.max_model_len} tokens"}
                        ).encode(),
                        "application/json",
                    )
                if body.get("model") != fake.model:
                    return self._send(
                        404, json.dumps({"error": f"model {body.get('model')} not served"}).encode(), "application/json"
                    )
                self._send(200, json.dumps(fake.complete(body)).encode(), "application/json")

            def _send(self, code, data, ctype):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()  # quick shutdown

    def dead(self) -> bool:
        return self.dies_after is not None and len(self.bodies) >= self.dies_after

    def complete(self, body: dict) -> dict:
        with self.lock:
            self.running += 1
            load = self.running
        t0 = time.perf_counter()
        time.sleep(self.delay_s)
        n = min(int(body.get("max_tokens", 16)), self.tokens)
        drafts = n // 2
        # position i accepted by a share that falls with i and with concurrent load
        per_pos = [int(drafts * max(0.0, 0.9 - 0.15 * i - 0.02 * (load - 1))) for i in range(K)]
        with self.lock:
            self.running -= 1
            c = self.c
            c["drafts"] += drafts
            c["draft_tokens"] += drafts * K
            c["accepted"] += sum(per_pos)
            c["per_pos"] = [a + b for a, b in zip(c["per_pos"], per_pos)]
            c["generation_tokens"] += n
            c["requests"] += 1
            c["latency_sum"] += time.perf_counter() - t0
        return {
            "id": "cmpl-fake",
            "object": "text_completion",
            "model": self.model,
            "choices": [{"index": 0, "text": " x" * n, "finish_reason": "length"}],
            "usage": {
                "prompt_tokens": len(body.get("prompt", "").split()),
                "completion_tokens": n,
                "total_tokens": n + len(body.get("prompt", "").split()),
            },
        }

    def render(self) -> str:
        with self.lock:
            c = dict(self.c)
            per_pos = "\n".join(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{self.model}",'
                f'position="{i}"}} {float(v)}'
                for i, v in enumerate(c.pop("per_pos"))
            )
        fields = {
            "model": self.model,
            "running": float(self.running),
            "per_pos": per_pos,
            **{k: float(v) for k, v in c.items()},
        }
        out = TEMPLATE
        for key, value in fields.items():
            out = out.replace("{" + key + "}", str(value))
        if not self.spec:
            out = "\n".join(line for line in out.splitlines() if "spec_decode" not in line) + "\n"
        return out.replace("vllm:", self.prefix + "vllm:") if self.prefix else out

    def restart(self) -> None:
        """Counters start again from zero, as after a server restart."""
        with self.lock:
            self.c = {key: ([0] * K if key == "per_pos" else 0) for key in self.c}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
