"""A loopback HTTP server that speaks the OpenAI chat-completions API, with scriptable faults.

    with StubServer(reply="SCORE: 7", delay_s=0.05) as stub:
        stub.script(Step(status=429), Step(status=500), Step(content="**SCORE: 8**"))
        client = openai.OpenAI(base_url=stub.url, api_key="x")   # stub.url ends in /v1
        ...
        stub.requests          # the JSON bodies received, in arrival order
        stub.calls             # how many chat-completion requests arrived
        stub.max_in_flight     # the most requests the server was answering at once

Scripted steps are consumed one per request, in arrival order; once the script runs out every
request gets the default reply (`reply`, or `respond(body)` when given). Usage figures are word
counts, so token accounting can be checked exactly: prompt = words in all messages, completion =
words in the reply.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Step:
    """How to answer one request.

    content: the assistant message (None sends `"content": null`).
    status: HTTP status; anything but 200 sends an OpenAI-style error body.
    delay_s: wait this long before answering (longer than the client's timeout = a timeout).
    raw: send these bytes verbatim as a 200 body instead (malformed JSON, say).
    headers: extra response headers (e.g. {"retry-after": "0"}).
    finish_reason: the choice's finish_reason ("length": the reply hit max_tokens).
    """

    content: str | None = "SCORE: 7"
    status: int = 200
    delay_s: float = 0.0
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 512  # the default backlog of 5 drops bursts of new connections (async clients)


class StubServer:
    """Serves /v1/chat/completions and /v1/models on 127.0.0.1 from a background thread."""

    def __init__(self, reply: str = "SCORE: 7", delay_s: float = 0.0, respond: Callable[[dict], str] | None = None):
        self.reply = reply
        self.delay_s = delay_s
        self.respond = respond
        self.requests: list[dict] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._steps: deque[Step] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    def script(self, *steps: Step) -> None:
        """Queue answers for the next requests, in order."""
        with self._lock:
            self._steps.extend(steps)

    def reset(self) -> None:
        """Forget received requests and any unconsumed script."""
        with self._lock:
            self.requests.clear()
            self._steps.clear()
            self.max_in_flight = 0

    def start(self) -> StubServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()  # wakes handlers sleeping on a delay
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _next(self, body: dict) -> Step:
        with self._lock:
            self.requests.append(body)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            if self._steps:
                return self._steps.popleft()
        content = self.respond(body) if self.respond else self.reply
        return Step(content=content, delay_s=self.delay_s)

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._closing.wait(seconds)


def _words(text: str | None) -> int:
    return len(text.split()) if text else 0


def _completion(body: dict, content: str | None, finish_reason: str = "stop") -> dict:
    prompt_tokens = sum(_words(m.get("content")) for m in body.get("messages", []) if isinstance(m.get("content"), str))
    completion_tokens = _words(content)
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "stub"),
        "choices": [{"index": 0, "finish_reason": finish_reason, "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def _handler(stub: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints do
        disable_nagle_algorithm = True  # headers and body go out in separate writes

        def log_message(self, *args) -> None:  # quiet test output
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, json.dumps({"object": "list", "data": [{"id": "stub", "object": "model"}]}).encode())
            else:
                self._send(404, _error_body(404))

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            raw = self.rfile.read(length)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, _error_body(404))
                return
            body = json.loads(raw or b"{}")
            step = stub._next(body)
            stub._sleep(step.delay_s)
            stub._done()  # before answering, so a client's next request never overlaps this one
            if stub._closing.is_set():
                return
            if step.raw is not None:
                self._send(200, step.raw, step.headers)
            elif step.status != 200:
                self._send(step.status, _error_body(step.status), step.headers)
            else:
                self._send(200, json.dumps(_completion(body, step.content, step.finish_reason)).encode(), step.headers)

        def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                pass

    return Handler


def _error_body(status: int) -> bytes:
    default = "server_error" if status >= 500 else "invalid_request_error"
    kind = {429: "rate_limit_exceeded", 404: "not_found"}.get(status, default)
    return json.dumps({"error": {"message": f"stub error {status}", "type": kind, "code": status}}).encode()


def main() -> None:
    """`python tests/openai_stub.py --delay-s 0.1`: serve until killed (first stdout line: the URL).

    For benchmarks, so the server does not share the client's process (and GIL)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--delay-s", type=float, default=0.0, help="latency added to every request")
    parser.add_argument("--reply", default="RATIONALE: fine\nSCORE: 7", help="the assistant message")
    args = parser.parse_args()
    with StubServer(reply=args.reply, delay_s=args.delay_s) as stub:
        print(stub.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
