"""A small Sentry envelope receiver on 127.0.0.1, for tests that use the real SDK over HTTP."""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sentry_sdk.envelope import Envelope


class Receiver:
    def __init__(self):
        self.envelopes: list[Envelope] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                enc = self.headers.get("Content-Encoding", "")
                if enc == "gzip":
                    body = gzip.decompress(body)
                elif enc == "deflate":
                    body = zlib.decompress(body)
                with receiver.lock:
                    receiver.envelopes.append(Envelope.deserialize(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def dsn(self) -> str:
        return f"http://publickey@127.0.0.1:{self.port}/1"

    def items(self, kind: str) -> list:
        with self.lock:
            return [item for env in self.envelopes for item in env.items if item.type == kind]

    @staticmethod
    def _json(item) -> dict:
        return item.payload.json if item.payload.json is not None else json.loads(item.payload.get_bytes())

    def transactions(self) -> list[dict]:
        return [self._json(item) for item in self.items("transaction")]

    def events(self) -> list[dict]:
        return [self._json(item) for item in self.items("event")]

    def logs(self) -> list[dict]:
        out = []
        for item in self.items("log"):
            out.extend(self._json(item).get("items", []))
        return out

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
