"""A scripted OpenAI-compatible LM: a real HTTP server (``POST /v1/chat/completions``) for tests
and benchmarks of GEPA steps, standing in for an LLM provider we cannot reach here.

Three scripts, chosen by what the request asks for:

- a DSPy program call (ChatAdapter format): the answer is the ``question`` input transformed by
  directives found in the predictor's instructions: ``UPPERCASE`` -> upper case, ``REVERSED`` ->
  reversed, ``PREFIX=<word>`` -> ``<word> `` prepended. So outputs depend on the candidate.
- a GEPA reflection (the prompt quotes the current instruction and asks for a new one): the new
  instruction adds the next directive of ``REFLECTION_STEPS`` the old one lacks.
- a coding-agent request (``GENESIS-CODER`` in the system message): the reply is
  ``coder_reply`` (a unified diff the test sets).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REFLECTION_STEPS = ("PREFIX=ANSWER:", "UPPERCASE")


def transform(question: str, instructions: str) -> str:
    answer = question
    if "UPPERCASE" in instructions:
        answer = answer.upper()
    if "REVERSED" in instructions:
        answer = answer[::-1]
    prefix = re.search(r"PREFIX=(\S+)", instructions)
    if prefix:
        answer = f"{prefix.group(1)} {answer}"
    return answer


def _field(text: str, name: str) -> str:
    match = re.search(rf"\[\[ ## {re.escape(name)} ## \]\]\n(.*?)(?=\n\n|\Z)", text, re.S)
    return match.group(1).strip() if match else ""


class ScriptedLM:
    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.calls: list[dict] = []
        self.coder_reply = ""
        self.lock = threading.Lock()
        lm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # a plain page, for egress tests
                data = f"reached {lm.port}".encode()
                self.send_response(200)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                with lm.lock:
                    lm.calls.append(
                        {"path": self.path, "authorization": self.headers.get("authorization"), "body": body}
                    )
                if not self.path.endswith("/chat/completions"):
                    self.send_error(404)
                    return
                text = lm.reply(body.get("messages") or [])
                data = json.dumps(
                    {
                        "id": "chatcmpl-scripted",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", "scripted"),
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base_url = f"http://{host}:{self.port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reply(self, messages: list[dict]) -> str:
        system = next((m["content"] for m in messages if m.get("role") == "system"), "")
        user = "\n".join(
            m["content"] for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str)
        )
        if "GENESIS-CODER" in system:
            return self.coder_reply
        if "I provided an assistant with the following instructions" in user:
            current = re.search(r"```\n?(.*?)\n?```", user, re.S)
            old = current.group(1).strip() if current else ""
            missing = next((step for step in REFLECTION_STEPS if step not in old), None)
            return f"```\n{old} {missing or 'Be concise.'}\n```"
        objective = system.split("your objective is:", 1)[-1] if "your objective is:" in system else system
        outputs = re.findall(
            r"\d+\. `(\w+)`", system.split("Your output fields are:", 1)[-1].split("All interactions", 1)[0]
        )
        answer = transform(_field(user, "question"), objective)
        return (
            "\n\n".join(f"[[ ## {name} ## ]]\n{answer}" for name in (outputs or ["answer"]))
            + "\n\n[[ ## completed ## ]]"
        )

    def chat(self, prompt: str) -> str:
        """Plain chat call as a reflection LM for gepa.optimize (over HTTP like any client)."""
        import httpx

        response = httpx.post(
            f"{self.base_url}/chat/completions",
            timeout=30,
            json={"model": "scripted", "messages": [{"role": "user", "content": prompt}]},
        )
        response.raise_for_status()
        return response.json()["choices"][0]["message"]["content"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
