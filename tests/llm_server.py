"""A real OpenAI-compatible HTTP server on loopback with scripted replies.

The tests drive the real ``openai`` client against it. Each scripted entry is one
HTTP answer: a reply (content, finish reason, usage), an error status, or a delay.
The structured-output probe (``max_tokens == 16``) is answered separately, so scripts
only list the answers to real proposal requests.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    content: str = ""
    status: int = 200
    delay: float = 0.0
    finish_reason: str = "stop"
    prompt_tokens: int = 120
    completion_tokens: int = 40


@dataclass
class ScriptedLLM:
    # True: OpenAI's json_schema; False: refuses any response_format (HTTP 400);
    # "json_object": llama.cpp's server, HTTP 500 on json_schema, takes {"type": "json_object", "schema": …}
    supports_schema: bool | str = True
    script: deque = field(default_factory=deque)
    requests: list = field(default_factory=list)
    probes: int = 0
    default: Answer | None = None

    def add(self, *answers: Answer | str) -> "ScriptedLLM":
        for answer in answers:
            self.script.append(Answer(content=answer) if isinstance(answer, str) else answer)
        return self

    def next_answer(self) -> Answer:
        if self.script:
            return self.script.popleft()
        return self.default or Answer(status=500, content="script exhausted")


def make_handler(llm: ScriptedLLM):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status: int, body: dict, headers: dict | None = None):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def refusal(self, body: dict) -> tuple[int, str] | None:
            kind = (body.get("response_format") or {}).get("type")
            if kind is None or llm.supports_schema is True:
                return None
            if llm.supports_schema == "json_object":
                return None if kind == "json_object" else (500, "Internal Server Error: unsupported response_format")
            return 400, f"response_format {kind} is not supported"

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if refused := self.refusal(body):
                if body.get("max_tokens") == 16:
                    llm.probes += 1
                return self.reply(refused[0], {"error": {"message": refused[1]}})
            if body.get("max_tokens") == 16:  # the structured-output probe
                llm.probes += 1
                return self.reply(200, completion("{}", "stop", 5, 2))
            llm.requests.append(body)
            answer = llm.next_answer()
            if answer.delay:
                time.sleep(answer.delay)
            if answer.status != 200:
                return self.reply(answer.status, {"error": {"message": answer.content or "error"}},
                                  {"retry-after-ms": "10"} if answer.status == 429 else None)
            try:
                self.reply(200, completion(answer.content, answer.finish_reason, answer.prompt_tokens,
                                           answer.completion_tokens))
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


def completion(content: str, finish_reason: str, prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "scripted",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens,
                  "prompt_tokens_details": {"cached_tokens": 20}},
    }


class LLMServer:
    def __init__(self, llm: ScriptedLLM):
        self.llm = llm
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(llm))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "LLMServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
