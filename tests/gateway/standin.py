"""Loopback stand-ins for the three model providers (OpenAI-compatible, Anthropic, Gemini), streaming
included, recording every request they receive so tests can check what the gateway forwarded.

Behaviour is chosen by the request's model name: ``echo-key`` answers 401 quoting the key it got (as some
providers do), ``hang`` never answers within the gateway's time-out, ``gated`` streams its first event and
waits for the test to release the rest (proof that the gateway forwards chunk by chunk), ``cut`` streams a
few events and drops the connection before its usage chunk (an answer cut short), ``echo-headers``
answers 200 quoting every request header (the key included) in its body and in a response header, streamed
with the key split across two writes when asked to stream, ``gzip`` answers with a compressed body. Every
method is recorded, so a test can prove that a refused route never arrived.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from ..loopback import send_json


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int = 0


@dataclass
class StandIn:
    url: str
    seen: list[Seen] = field(default_factory=list)
    sockets: list = field(default_factory=list)  # server side of each request's connection
    release: threading.Event = field(default_factory=threading.Event)

    def last(self) -> Seen:
        return self.seen[-1]


OPENAI_USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18,
                "prompt_tokens_details": {"cached_tokens": 3}}
ANTHROPIC_USAGE = {"input_tokens": 20, "output_tokens": 9, "cache_read_input_tokens": 5,
                   "cache_creation_input_tokens": 0}
GEMINI_USAGE = {"promptTokenCount": 9, "candidatesTokenCount": 4, "thoughtsTokenCount": 2, "totalTokenCount": 15}


def _handler(state: StandIn):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # as real servers do: headers and body leave at once

        def log_message(self, *args) -> None:
            return

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def do_DELETE(self) -> None:
            self._serve()

        def do_PUT(self) -> None:
            self._serve()

        def do_PATCH(self) -> None:
            self._serve()

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            state.seen.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body,
                                   self.client_address[1]))
            state.sockets.append(self.connection)
            doc = json.loads(body) if body else {}
            path = urlsplit(self.path).path
            model = doc.get("model") or path.rpartition("/models/")[2].partition(":")[0]
            if model == "echo-key":
                key = self.headers.get("authorization") or self.headers.get("x-api-key") or ""
                return self._json(401, {"error": {"message": f"Incorrect API key provided: {key}"}})
            if model == "echo-headers":
                return self._echo_headers(doc)
            if model == "gzip":
                raw = gzip.compress(json.dumps({"id": "x", "choices": []}).encode())
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
                return None
            if model == "hang":
                time.sleep(3)
                return self._json(200, {})
            if path == "/v1/chat/completions":
                return self._chat(doc)
            if path == "/v1/responses":
                return self._responses(doc)
            if path == "/v1/embeddings":
                return self._json(200, {"object": "list", "model": model, "data": [{"embedding": [0.1, 0.2]}],
                                        "usage": {"prompt_tokens": 5, "total_tokens": 5}})
            if path == "/v1/models" and "x-api-key" not in self.headers:
                return self._json(200, {"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model"}]})
            if path == "/v1/messages":
                return self._messages(doc)
            if path == "/v1/messages/count_tokens":
                return self._json(200, {"input_tokens": 42})
            if path.startswith("/v1beta/models/"):
                return self._gemini(path, model)
            return self._json(404, {"error": {"message": f"stand-in: no route {path}"}})

        def _echo_headers(self, doc) -> None:
            """A 200 that quotes the request's headers (as a debugging proxy might), the key among them."""
            key = (self.headers.get("authorization") or self.headers.get("x-api-key")
                   or self.headers.get("x-goog-api-key") or "")
            if not doc.get("stream"):
                raw = json.dumps({"id": "chatcmpl-echo", "object": "chat.completion", "choices": [],
                                  "echo": {k.lower(): v for k, v in self.headers.items()}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Echo-Key", key)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            cut = len(key) // 2
            for part in (b'data: {"echo": "' + key[:cut].encode(), key[cut:].encode() + b'"}\n\n',
                         b"data: [DONE]\n\n"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
                time.sleep(0.2)  # the halves leave as separate reads
            self.wfile.write(b"0\r\n\r\n")

        def _json(self, status: int, doc) -> None:
            send_json(self, doc, status)

        def _sse(self, events: list[tuple[str | None, object]], gated: bool = False, cut: bool = False) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, (name, data) in enumerate(events):
                text = (f"event: {name}\n" if name else "") + "data: " + (
                    data if isinstance(data, str) else json.dumps(data)) + "\n\n"
                raw = text.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
                self.wfile.flush()
                if gated and i == 0:
                    state.release.wait(10)
                if cut and i == 1:  # gone before the usage chunk and the stream's end
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
            self.wfile.write(b"0\r\n\r\n")

        def _chat(self, doc) -> None:
            model = doc.get("model", "gpt-4o-mini")
            if not doc.get("stream"):
                return self._json(200, {"id": "chatcmpl-1", "object": "chat.completion", "model": model,
                                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                                     "finish_reason": "stop"}], "usage": OPENAI_USAGE})
            chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": model}
            words = ("tok ",) * 100 if model == "long" else ("Hel", "lo", "!")  # "long": a 100-event stream
            events = [(None, {**chunk, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]})
                      for w in words]
            events.append((None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
            if (doc.get("stream_options") or {}).get("include_usage"):
                events.append((None, {**chunk, "choices": [], "usage": OPENAI_USAGE}))
            events.append((None, "[DONE]"))
            self._sse(events, gated=model == "gated", cut=model == "cut")

        def _responses(self, doc) -> None:
            model = doc.get("model", "gpt-4o-mini")
            usage = {"input_tokens": 30, "output_tokens": 12, "total_tokens": 42,
                     "input_tokens_details": {"cached_tokens": 10}, "output_tokens_details": {"reasoning_tokens": 0}}
            response = {"id": "resp_1", "object": "response", "model": model, "status": "completed",
                        "output": [{"type": "message", "role": "assistant",
                                    "content": [{"type": "output_text", "text": "ok"}]}], "usage": usage}
            if not doc.get("stream"):
                return self._json(200, response)
            self._sse([("response.created", {"type": "response.created", "response": {**response, "usage": None}}),
                       ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "ok"}),
                       ("response.completed", {"type": "response.completed", "response": response})])

        def _messages(self, doc) -> None:
            model = doc.get("model", "claude-sonnet-4-5")
            message = {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
                       "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
                       "stop_sequence": None, "usage": ANTHROPIC_USAGE}
            if not doc.get("stream"):
                return self._json(200, message)
            start = {**message, "content": [], "stop_reason": None,
                     "usage": {**ANTHROPIC_USAGE, "output_tokens": 1}}
            self._sse([("message_start", {"type": "message_start", "message": start}),
                       ("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": {"type": "text", "text": ""}}),
                       ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "text_delta", "text": "hi"}}),
                       ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                       ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                          "stop_sequence": None}, "usage": {"output_tokens": 9}}),
                       ("message_stop", {"type": "message_stop"})])

        def _gemini(self, path: str, model: str) -> None:
            verb = path.rpartition(":")[2]
            if verb == "countTokens":
                return self._json(200, {"totalTokens": 9})
            chunk = {"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}}], "modelVersion": model}
            if verb == "generateContent":
                return self._json(200, {**chunk, "usageMetadata": GEMINI_USAGE})
            partial = {"promptTokenCount": 9, "candidatesTokenCount": 1, "totalTokenCount": 10}
            if parse_qs(urlsplit(self.path).query).get("alt") == ["sse"]:
                return self._sse([(None, {**chunk, "usageMetadata": partial}),
                                  (None, {**chunk, "usageMetadata": GEMINI_USAGE})])
            return self._json(200, [{**chunk, "usageMetadata": partial}, {**chunk, "usageMetadata": GEMINI_USAGE}])

    return Handler


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # the gateway hung up on a "hang" answer
        return


def start_standin() -> tuple[StandIn, ThreadingHTTPServer]:
    state = StandIn("")
    server = _QuietServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return state, server
