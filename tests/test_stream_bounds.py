"""A load sweep's request meets a hostile server: every read is bounded in time (a deadline for the whole
request, not one per read) and in size, and every malformed answer is one line, with what arrived before it kept."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.engines import client as stream
from engine.engines.client import stream_one

pytestmark = pytest.mark.fast

GOOD = 'data: {"choices": [{"text": "hello"}]}\n\n'


def serve(body_of):
    """A server on a free port whose answer to any POST is what ``body_of(write)`` writes."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                body_of(lambda text: (self.wfile.write(text.encode()), self.wfile.flush()))
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def hostile():
    servers = []

    def make(body_of):
        server, url = serve(body_of)
        servers.append(server)
        return url

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def _send(url: str, timeout_s: float = 5.0, abort=None) -> dict:
    return stream_one(url, "m", "p", 8, False, None, timeout_s, abort)


def test_a_server_that_sends_a_byte_a_second_is_cut_at_the_requests_deadline(hostile):
    def trickle(write):
        write(GOOD)
        for _ in range(100):
            write("d")
            time.sleep(0.2)

    out = _send(hostile(trickle), timeout_s=1.0)
    assert out["error"] == "no complete answer within 1 s"
    assert out["latency_s"] < 2.5 and out["text"] == "hello"  # what came before the cut is kept


def test_an_answer_past_the_size_cap_is_not_read_further(hostile, monkeypatch):
    monkeypatch.setattr(stream, "MAX_BYTES", 1000)
    out = _send(hostile(lambda write: [write(GOOD) for _ in range(200)]))
    assert out["error"].startswith("the answer passed 0 MB") and len(out["text"]) < 1000


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("<html><body>Bad gateway</body></html>\n", "the server answered 200 with no server-sent events"),
        ('data: {"choices": [{"text": "he\n\n', "a malformed chunk: "),
        ("data: [1, 2]\n\n", "a chunk that is not an object: "),
    ],
)
def test_a_malformed_answer_is_one_line(hostile, body, error):
    out = _send(hostile(lambda write: write(body)))
    assert out["error"].startswith(error) and "\n" not in out["error"]


def test_odd_but_harmless_chunks_are_skipped(hostile):
    body = 'data: {"choices": [{"text": null}, 7]}\n\ndata: {"choices": "x", "usage": [1]}\n\n' + GOOD
    out = _send(hostile(lambda write: write(body + "data: [DONE]\n\n")))
    assert out["error"] is None and out["text"] == "hello" and out["usage"] == {}


@pytest.mark.parametrize("end", ["", 'data: {"choices": [{"text": "", "finish_reason": "length"}]}\n\n'])
def test_a_stream_cut_before_its_last_chunk_is_an_error_never_a_complete_answer(hostile, end):
    """A replica killed mid-stream behind a router ended the stream with neither a finish_reason nor [DONE]: the
    row was stored as answered with 0 tokens. A stream is complete only when its server says so."""
    out = _send(hostile(lambda write: write(GOOD + end)))
    if end:
        assert out["error"] is None and out["text"] == "hello"
    else:
        assert "the stream ended before its last chunk" in out["error"] and out["text"] == "hello"


def test_a_refused_port_is_one_line(hostile):
    server, url = serve(lambda write: None)
    server.shutdown()
    server.server_close()
    out = _send(url)
    assert out["error"].startswith("ConnectionRefusedError") and out["text"] == ""


def test_a_stopped_sweep_ends_a_request_in_flight_at_its_next_chunk(hostile):
    abort = threading.Event()

    def slow(write):
        for _ in range(50):
            write(GOOD)
            time.sleep(0.1)

    threading.Timer(0.3, abort.set).start()
    out = _send(hostile(slow), abort=abort)
    assert out["error"] == "the sweep was stopped" and out["latency_s"] < 2


# the engines' client (`engines sweep`, `watch`, `side-by-side`): one clear line for every malformed answer


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("<html>Bad gateway</html>", "is not Prometheus text"),
        ("vllm:spec_decode_num_drafts_total NaN\n", "is nan, not a count"),
        ("vllm:spec_decode_num_drafts_total -4\n", "is -4, not a count"),
        ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1000000000"} 1\n', "not a whole number below"),
        ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="x"} 1\n', "not a whole number below"),
    ],
)
def test_hostile_metrics_are_one_line(body, error):
    from engine.engines.counters import parse_metrics
    from engine.errors import PhoenixError

    with pytest.raises(PhoenixError, match=error):
        parse_metrics(body)


def _client_against(hostile, body_of, timeout_s=5.0):
    from engine.engines.client import ServerClient

    return ServerClient(hostile(body_of), "m", timeout_s)


@pytest.mark.parametrize(
    "body",
    ['{"choices": [{"text": "he', "[1, 2]", '{"choices": [{"text": "x"}], "usage": {"completion_tokens": "many"}}'],
)
def test_a_completion_that_is_not_one_is_one_line(hostile, body):
    from engine.errors import PhoenixError

    client = _client_against(hostile, lambda write: write(body))
    with pytest.raises(PhoenixError, match="answered with something that is not an OpenAI completion"):
        client.complete("p", 4)


def test_a_null_text_is_an_empty_answer(hostile):
    client = _client_against(hostile, lambda write: write('{"choices": [{"text": null}], "usage": {}}'))
    assert client.complete("p", 4)["text"] == ""


def test_a_trickling_or_huge_answer_from_an_engine_is_cut_off(hostile, monkeypatch):
    from engine.engines import client as engine_client
    from engine.errors import PhoenixError

    def trickle(write):
        for _ in range(100):
            write("{")
            time.sleep(0.2)

    slow = _client_against(hostile, trickle, timeout_s=1.0)
    start = time.perf_counter()
    with pytest.raises(PhoenixError, match=r"did not finish within 1 s"):
        slow.complete("p", 4)
    assert time.perf_counter() - start < 3
    monkeypatch.setattr(engine_client, "MAX_BODY", 1000)
    big = _client_against(hostile, lambda write: [write("x" * 500) for _ in range(10)])
    with pytest.raises(PhoenixError, match=r"sent more than 0 MB"):
        big.complete("p", 4)
