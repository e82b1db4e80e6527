"""The one door into the engine core (vLLM's ``EngineClient``): ``submit`` a request and get its
``RequestStream``, ``abort`` it, read its outputs. The HTTP server reads a stream from its event loop while the
core steps on its own thread; ``bench --concurrency`` steps the core itself (``drain``) and reads each stream's
end. The client is the core's subscriber that routes each ``RequestOutput`` to its request's stream, by id: the
request carries no callback, and nothing but outputs crosses from the loop's thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

from engine.decode.handoff import RequestOutput
from engine.decode.sequence import Finished, Request


class RequestStream:
    """One request's outputs, in order. ``tokens``: whether it wants each step's tokens (a stream) or only its
    end (a whole response: no event a step to wake its reader for nothing). Bound to the event loop it was
    opened on, where there is one; else kept for a reader on the core's own thread."""

    def __init__(self, request: Request, tokens: bool):
        self.request, self.tokens = request, tokens
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        self.queue: asyncio.Queue[RequestOutput] | None = asyncio.Queue() if self.loop is not None else None
        self.kept: deque[RequestOutput] = deque()  # a reader without an event loop: what arrived
        self.finished: Finished | None = None

    def put(self, output: RequestOutput) -> None:
        """On the core's thread: hand the output to the reader's event loop (or keep it)."""
        if output.finished is not None:
            self.finished = output.finished
        if self.loop is None or self.queue is None:
            self.kept.append(output)
        elif not self.loop.is_closed():  # after a forced exit nobody reads: the request is recorded all the same
            self.loop.call_soon_threadsafe(self.queue.put_nowait, output)

    async def get(self, timeout_s: float | None = None) -> RequestOutput | None:
        """The next output, or None after ``timeout_s`` with none."""
        assert self.queue is not None, "a stream opened outside an event loop is read from .kept"
        try:
            return await asyncio.wait_for(self.queue.get(), timeout=timeout_s)
        except TimeoutError:
            return None


class EngineClient:
    """submit, abort, stream; ``core`` is the scheduler (engine.decode.scheduler), which publishes to this."""

    def __init__(self, core):
        self.core = core
        self._streams: dict[int, RequestStream] = {}  # by the request object's id: ids the caller gives may repeat
        self._lock = threading.Lock()
        core.subscribe(self)

    def submit(self, request: Request, tokens: bool = False) -> RequestStream:
        """Queue ``request`` (the core's QueueFull or stopped loop raised as they are); its stream."""
        stream = RequestStream(request, tokens)
        with self._lock:
            self._streams[id(request)] = stream
        try:
            self.core.submit(request)
        except BaseException:
            with self._lock:
                self._streams.pop(id(request), None)
            raise
        return stream

    def abort(self, request: Request) -> None:
        """The request leaves before the core's next step (its client went away); it ends ``cancelled``."""
        request.cancelled = True

    def drain(self) -> None:
        """Step the core on this thread until every request submitted so far has ended (the bench's door)."""
        self.core.drain()

    def publish(self, output: RequestOutput) -> None:
        with self._lock:
            stream = self._streams.get(id(output.request))
            if stream is not None and output.finished is not None:
                del self._streams[id(output.request)]
        if stream is not None and (output.finished is not None or stream.tokens):
            stream.put(output)
