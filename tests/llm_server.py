"""A real OpenAI-compatible HTTP server on loopback with scripted replies.

The tests drive the real ``openai`` client against it. Each scripted entry is one
HTTP answer: a reply (content, finish reason, usage, reasoning tokens), an error
status, or a delay. Before a request reaches the script it is checked the way the
server it stands in for checks it, and refused with that server's status and error
body; a refused request does not use up a scripted answer.

``flavour``:

- ``"openai"``: OpenAI with a chat model (gpt-4o-mini): only the documented
  chat-completions parameters; ``max_tokens`` and ``max_completion_tokens`` both taken;
  ``reasoning_effort`` refused (the model does not reason).
- ``"openai-reasoning"``: OpenAI with a reasoning model (o-series, GPT-5): refuses
  ``max_tokens`` with OpenAI's exact 400 body, ``temperature``/``top_p`` other than 1,
  and ``reasoning_effort`` outside minimal/low/medium/high. Answers' ``reasoning_tokens``
  count against the completion cap, as OpenAI's do: below them the reply is empty with
  finish reason ``length``.
- ``"legacy"``: an older server (vLLM, llama.cpp, Azure API versions of 2024) that
  knows ``max_tokens`` only: ``max_completion_tokens`` and the other newer parameters
  are "Unrecognized request argument supplied" (400).

``supports_schema`` (the response format, independent of the flavour): True, OpenAI's
``json_schema`` (a strict schema is checked for OpenAI's rules: every object has
``additionalProperties: false`` and lists every property in ``required``); False,
every ``response_format`` refused (400); ``"json_object"``, llama.cpp's server (HTTP 500
on ``json_schema``, takes ``{"type": "json_object", "schema": …}``).

``check_content``: under a strict ``json_schema`` the scripted content must conform to
the schema (as the real server's would); one that does not is a mistake in the test,
answered with a 500 and listed in ``violations``.

As OpenAI does, before any of that: a POST anywhere but ``/v1/chat/completions`` is 404
``Invalid URL``; with ``api_key`` set, a request without that bearer key is 401
``invalid_api_key`` (the message shows the key sent, masked, as OpenAI's does); with
``models`` set, a request for another model is 404 ``model_not_found``.

An endpoint check (a request capped at one completion token: autorl's ``check_endpoint``)
is checked the same way but answered without using up a scripted answer, as a real
server answers it whatever else it is asked; it is recorded in ``probes``, not ``requests``.

An answer's ``delay`` holds it for that many seconds; its ``hold`` (an Event) holds it
until the test sets it: a reply past the client's timeout, released when the test says.

``requests`` holds every request body received but the probes, refused ones included, in
order; ``refusals`` the (status, message) of each refusal.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The top-level parameters of POST /v1/chat/completions that OpenAI documents.
OPENAI_PARAMETERS = frozenset({
    "model", "messages", "max_completion_tokens", "max_tokens", "response_format", "seed", "reasoning_effort",
    "temperature", "top_p", "n", "stop", "stream", "tools", "tool_choice", "user", "metadata", "store", "logprobs",
    "top_logprobs", "presence_penalty", "frequency_penalty", "logit_bias", "parallel_tool_calls", "service_tier",
    "prediction", "modalities", "audio", "stream_options", "verbosity", "prompt_cache_key", "safety_identifier",
})
NEWER_PARAMETERS = frozenset({"max_completion_tokens", "reasoning_effort", "verbosity", "prompt_cache_key",
                              "safety_identifier", "prediction", "modalities", "audio", "store", "metadata"})
REASONING_EFFORTS = ("minimal", "low", "medium", "high")
FLAVOURS = ("openai", "openai-reasoning", "legacy")

MAX_TOKENS_REFUSAL = {"error": {
    "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
               "Use 'max_completion_tokens' instead.",
    "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}}


def error(message: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


@dataclass
class Answer:
    content: str = ""
    status: int = 200
    delay: float = 0.0
    finish_reason: str = "stop"
    prompt_tokens: int = 120
    completion_tokens: int = 40  # the visible reply's tokens; reasoning tokens come on top
    reasoning_tokens: int = 0
    cached_tokens: int = 20
    hold: threading.Event | None = None  # answered once the test sets it


@dataclass
class ScriptedLLM:
    flavour: str = "openai"
    # True: OpenAI's json_schema; False: refuses any response_format (HTTP 400);
    # "json_object": llama.cpp's server, HTTP 500 on json_schema, takes {"type": "json_object", "schema": …}
    supports_schema: bool | str = True
    check_content: bool = False
    script: deque = field(default_factory=deque)
    requests: list = field(default_factory=list)
    refusals: list = field(default_factory=list)
    violations: list = field(default_factory=list)
    default: Answer | None = None
    api_key: str | None = None  # set: requests must carry it (Authorization: Bearer …), else 401
    models: tuple[str, ...] | None = None  # set: the models served; another is 404 model_not_found
    probes: list = field(default_factory=list)
    _refused_bodies: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        if self.flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {FLAVOURS}, got {self.flavour!r}")

    def add(self, *answers: Answer | str) -> "ScriptedLLM":
        for answer in answers:
            self.script.append(Answer(content=answer) if isinstance(answer, str) else answer)
        return self

    def next_answer(self) -> Answer:
        if self.script:
            return self.script.popleft()
        return self.default or Answer(status=500, content="script exhausted")

    @property
    def answered(self) -> list[dict]:
        """The requests that were not refused."""
        refused = {id(body) for body in self._refused_bodies}
        return [body for body in self.requests if id(body) not in refused]

    # -- the server's checks ----------------------------------------------------------------

    @staticmethod
    def is_probe(body: dict) -> bool:
        return body.get("max_completion_tokens", body.get("max_tokens")) == 1

    def gate(self, path: str, authorization: str | None, body: dict) -> tuple[int, dict] | None:
        """OpenAI's checks before the parameters: the route, the key, the model."""
        if path.rstrip("/") != "/v1/chat/completions":
            return 404, error(f"Invalid URL (POST {path})")
        if self.api_key is not None:
            sent = (authorization or "").removeprefix("Bearer ").strip()
            if not sent:
                return 401, error("You didn't provide an API key. You need to provide your API key in an "
                                  "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
            if sent != self.api_key:
                masked = sent[:3] + "*" * max(len(sent) - 7, 0) + sent[-4:]
                return 401, error(f"Incorrect API key provided: {masked}. You can find your API key at "
                                  "https://platform.openai.com/account/api-keys.", code="invalid_api_key")
        if self.models is not None and body.get("model") not in self.models:
            return 404, error(f"The model `{body.get('model')}` does not exist or you do not have access to it.",
                              code="model_not_found")
        return None

    def refusal(self, body: dict) -> tuple[int, dict] | None:
        """The (status, error body) this server answers ``body`` with, or None to answer it."""
        allowed = OPENAI_PARAMETERS - NEWER_PARAMETERS if self.flavour == "legacy" else OPENAI_PARAMETERS
        for name in body:
            if name not in allowed:
                return 400, error(f"Unrecognized request argument supplied: {name}")
        for name in ("model", "messages"):
            if name not in body:
                return 400, error(f"Missing required parameter: '{name}'.", name, "missing_required_parameter")
        if self.flavour == "openai-reasoning":
            if "max_tokens" in body:
                return 400, MAX_TOKENS_REFUSAL
            for name in ("temperature", "top_p"):
                if name in body and body[name] != 1:
                    return 400, error(f"Unsupported value: '{name}' does not support {body[name]} with this model. "
                                      "Only the default (1) value is supported.", name, "unsupported_value")
            if "reasoning_effort" in body and body["reasoning_effort"] not in REASONING_EFFORTS:
                return 400, error(f"Invalid value: '{body['reasoning_effort']}'. Supported values are: 'minimal', "
                                  "'low', 'medium', and 'high'.", "reasoning_effort", "invalid_value")
        elif self.flavour == "openai" and "reasoning_effort" in body:
            return 400, error("Unsupported parameter: 'reasoning_effort' is not supported with this model.",
                              "reasoning_effort", "unsupported_parameter")
        return self.format_refusal(body.get("response_format"))

    def format_refusal(self, response_format: dict | None) -> tuple[int, dict] | None:
        if response_format is None:
            return None
        kind = response_format.get("type")
        if self.supports_schema == "json_object":
            if kind == "json_object":
                return None
            return 500, {"error": {"message": "Internal Server Error: unsupported response_format", "code": 500}}
        if self.supports_schema is not True:
            return 400, error(f"response_format {kind} is not supported", "response_format")
        if kind == "json_schema":
            spec = response_format.get("json_schema") or {}
            if not spec.get("name") or not isinstance(spec.get("schema"), dict):
                return 400, error("Missing required parameter: 'response_format.json_schema.name'.",
                                  "response_format.json_schema.name", "missing_required_parameter")
            if spec.get("strict") and (problems := strict_schema_errors(spec["schema"])):
                return 400, error(f"Invalid schema for response_format '{spec['name']}': {problems[0]}",
                                  "response_format", "invalid_json_schema")
        elif kind not in ("json_object", "text"):
            return 400, error(f"Invalid value: '{kind}'. Supported values are: 'json_object', 'json_schema', and "
                              "'text'.", "response_format.type", "invalid_value")
        return None

    def content_violation(self, body: dict, content: str) -> str | None:
        spec = (body.get("response_format") or {}).get("json_schema") or {}
        if not (self.check_content and spec.get("strict")):
            return None
        import jsonschema

        try:
            jsonschema.validate(json.loads(content), spec["schema"])
        except (json.JSONDecodeError, jsonschema.ValidationError) as exc:
            return f"scripted content does not conform to the strict schema: {str(exc).splitlines()[0]}"
        return None

    def reply_to(self, body: dict, answer: Answer) -> dict:
        """The completion for ``answer``; reasoning tokens count against the completion cap."""
        cap = body.get("max_completion_tokens", body.get("max_tokens"))
        content, finish_reason = answer.content, answer.finish_reason
        reasoning, visible = answer.reasoning_tokens, answer.completion_tokens
        if cap is not None and reasoning + visible > cap:
            finish_reason = "length"
            kept = max(cap - reasoning, 0)
            content = content[: len(content) * kept // max(visible, 1)]
            reasoning, visible = min(reasoning, cap), kept
        return completion(content, finish_reason, answer.prompt_tokens, reasoning + visible,
                          cached_tokens=answer.cached_tokens, reasoning_tokens=reasoning)


def strict_schema_errors(schema, context: tuple = ()) -> list[str]:
    """What OpenAI's strict mode refuses in ``schema``: an object without
    ``additionalProperties: false``, or with a property missing from ``required``."""
    problems: list[str] = []
    if not isinstance(schema, dict):
        return problems
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            problems.append(f"In context={context}, 'additionalProperties' is required to be supplied and to be false.")
        missing = [name for name in schema.get("properties", {}) if name not in schema.get("required", [])]
        if missing:
            problems.append(f"In context={context}, 'required' is required to be supplied and to be an array including "
                            f"every key in properties. Missing '{missing[0]}'.")
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            for name, sub in value.items():
                problems += strict_schema_errors(sub, context + (key, name))
        elif key == "items":
            problems += strict_schema_errors(value, context + ("items",))
        elif key in ("anyOf", "allOf", "oneOf") and isinstance(value, list):
            for index, sub in enumerate(value):
                problems += strict_schema_errors(sub, context + (key, str(index)))
    return problems


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

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            probe = llm.is_probe(body)
            (llm.probes if probe else llm.requests).append(body)
            if refused := llm.gate(self.path, self.headers.get("Authorization"), body) or llm.refusal(body):
                llm._refused_bodies.append(body)
                llm.refusals.append((refused[0], refused[1]["error"]["message"]))
                return self.reply(*refused)
            if probe:
                return self.reply(200, llm.reply_to(body, Answer("OK", prompt_tokens=10, completion_tokens=1)))
            answer = llm.next_answer()
            if answer.delay:
                time.sleep(answer.delay)
            if answer.hold is not None:
                answer.hold.wait()
            if answer.status != 200:
                return self.reply(answer.status, {"error": {"message": answer.content or "error"}},
                                  {"retry-after-ms": "10"} if answer.status == 429 else None)
            if violation := llm.content_violation(body, answer.content):
                llm.violations.append(violation)
                return self.reply(500, {"error": {"message": violation}})
            try:
                self.reply(200, llm.reply_to(body, answer))
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


def completion(content: str, finish_reason: str, prompt_tokens: int, completion_tokens: int,
               cached_tokens: int = 20, reasoning_tokens: int = 0) -> dict:
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "scripted",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens,
                  "prompt_tokens_details": {"cached_tokens": cached_tokens},
                  "completion_tokens_details": {"reasoning_tokens": reasoning_tokens}},
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
