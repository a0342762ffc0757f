"""A scripted LLM for tests: a real HTTP server (stdlib ``http.server``, in a thread) speaking the
Ollama ``/api/generate``, OpenAI ``/v1/chat/completions`` and Anthropic ``/v1/messages``
protocols. Each request takes the next scripted answer (text, or an HTTP status); every request
body is kept so tests can check what the LLM was told."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    text: str = ""
    status: int = 200
    tokens_in: int = 100
    tokens_out: int = 50
    delay_s: float = 0.0  # answer this late (timeouts)


@dataclass
class ScriptedLLM:
    answers: deque = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *answers: Answer | str) -> None:
        self.answers.extend(a if isinstance(a, Answer) else Answer(a) for a in answers)

    def prompts(self) -> list[str]:
        """What each request asked (the user prompt, whatever the protocol)."""
        out = []
        for body in self.requests:
            if "prompt" in body:
                out.append(body["prompt"])
            else:
                out.append(" ".join(m["content"] for m in body.get("messages", []) if m["role"] == "user"))
        return out

    def start(self) -> ScriptedLLM:
        llm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                llm.requests.append({**body, "_path": self.path, "_headers": dict(self.headers)})
                answer = llm.answers.popleft() if llm.answers else Answer(status=503, text="no scripted answer left")
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                if answer.status != 200:
                    self._send(answer.status, {"error": answer.text})
                elif self.path == "/api/generate":
                    self._send(
                        200,
                        {
                            "model": body.get("model"),
                            "response": answer.text,
                            "done": True,
                            "prompt_eval_count": answer.tokens_in,
                            "eval_count": answer.tokens_out,
                        },
                    )
                elif self.path == "/v1/chat/completions":
                    self._send(
                        200,
                        {
                            "id": "chatcmpl-test",
                            "object": "chat.completion",
                            "model": body.get("model"),
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": answer.text},
                                }
                            ],
                            "usage": {
                                "prompt_tokens": answer.tokens_in,
                                "completion_tokens": answer.tokens_out,
                                "total_tokens": answer.tokens_in + answer.tokens_out,
                            },
                        },
                    )
                elif self.path == "/v1/messages":
                    self._send(
                        200,
                        {
                            "id": "msg_test",
                            "type": "message",
                            "role": "assistant",
                            "model": body.get("model"),
                            "content": [{"type": "text", "text": answer.text}],
                            "stop_reason": "end_turn",
                            "usage": {"input_tokens": answer.tokens_in, "output_tokens": answer.tokens_out},
                        },
                    )
                else:
                    self._send(404, {"error": f"unknown path {self.path}"})

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
