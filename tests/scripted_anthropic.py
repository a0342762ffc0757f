"""A scripted Anthropic Messages API: a real HTTP server (``POST /v1/messages``) standing in for
Anthropic in the tests of the Claude Agent SDK coding backend (Claude Code is the client).

The agent's turns (requests that offer the ``Edit`` tool) are answered from ``script``: the
n-th turn after n tool results gets ``script[n]`` (a tool_use ``(name, input)``), then a final
text. Any other request Claude Code makes (a title, a quota probe, a token count) gets a short
text answer. Streaming requests are answered as server-sent events (``message_start``,
``content_block_start/delta/stop``, ``message_delta``, ``message_stop``), others as one JSON.
Every request is recorded in ``calls`` (path, headers that matter, body)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FINAL_TEXT = "The change is made."


class ScriptedAnthropic:
    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.calls: list[dict] = []
        self.script: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                body = json.loads(raw or b"{}")
                with api.lock:
                    api.calls.append(
                        {
                            "path": self.path,
                            "x-api-key": self.headers.get("x-api-key"),
                            "authorization": self.headers.get("authorization"),
                            "body": body,
                        }
                    )
                path = self.path.split("?")[0]
                if path.endswith("/messages/count_tokens"):
                    return self._json({"input_tokens": 100})
                if not path.endswith("/v1/messages"):
                    return self._json({"type": "error", "error": {"type": "not_found_error", "message": path}}, 404)
                blocks, stop = api.answer(body)
                message = {
                    "id": f"msg_{len(api.calls)}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "scripted"),
                    "content": blocks,
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 100, "output_tokens": 20},
                }
                if body.get("stream"):
                    return self._stream(message)
                return self._json(message)

            def _json(self, payload: dict, status: int = 200) -> None:
                self._send(json.dumps(payload).encode(), "application/json", status)

            def _send(self, data: bytes, content_type: str, status: int = 200) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, message: dict) -> None:
                events = [
                    (
                        "message_start",
                        {
                            "type": "message_start",
                            "message": {
                                **message,
                                "content": [],
                                "stop_reason": None,
                                "usage": {"input_tokens": 100, "output_tokens": 1},
                            },
                        },
                    )
                ]
                for index, block in enumerate(message["content"]):
                    if block["type"] == "text":
                        events += [
                            (
                                "content_block_start",
                                {
                                    "type": "content_block_start",
                                    "index": index,
                                    "content_block": {"type": "text", "text": ""},
                                },
                            ),
                            (
                                "content_block_delta",
                                {
                                    "type": "content_block_delta",
                                    "index": index,
                                    "delta": {"type": "text_delta", "text": block["text"]},
                                },
                            ),
                        ]
                    else:
                        events += [
                            (
                                "content_block_start",
                                {
                                    "type": "content_block_start",
                                    "index": index,
                                    "content_block": {**block, "input": {}},
                                },
                            ),
                            (
                                "content_block_delta",
                                {
                                    "type": "content_block_delta",
                                    "index": index,
                                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
                                },
                            ),
                        ]
                    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
                events += [
                    (
                        "message_delta",
                        {
                            "type": "message_delta",
                            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                            "usage": {"output_tokens": 20},
                        },
                    ),
                    ("message_stop", {"type": "message_stop"}),
                ]
                self._send(
                    "".join(f"event: {name}\ndata: {json.dumps(payload)}\n\n" for name, payload in events).encode(),
                    "text/event-stream",
                )

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base_url = f"http://{host}:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body: dict) -> tuple[list[dict], str]:
        tools = {tool.get("name") for tool in body.get("tools") or []}
        if "Edit" not in tools:  # a side request (title, quota, summary): a short text
            return [{"type": "text", "text": "Scripted edit"}], "end_turn"
        results = sum(
            1
            for message in body.get("messages") or []
            if isinstance(message.get("content"), list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        )
        if results < len(self.script):
            name, tool_input = self.script[results]
            return [{"type": "tool_use", "id": f"toolu_{results:04d}", "name": name, "input": tool_input}], "tool_use"
        return [{"type": "text", "text": FINAL_TEXT}], "end_turn"

    def agent_calls(self) -> list[dict]:
        """The agent's own turns (the requests that offered the editing tools)."""
        return [c for c in self.calls if any(t.get("name") == "Edit" for t in c["body"].get("tools") or [])]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
