"""The LLM client: any OpenAI-compatible endpoint through the ``openai`` package.

What a request carries, and why:

- ``max_completion_tokens``, not ``max_tokens``: OpenAI's reasoning models (o-series,
  GPT-5) refuse ``max_tokens`` with HTTP 400 ("Use 'max_completion_tokens' instead"),
  and every current OpenAI model takes the new name. A server that does not know it
  (older vLLM or llama.cpp builds, Azure's older API versions: HTTP 400 naming it as
  unsupported or unrecognized) gets ``max_tokens`` instead, for the rest of the session.
- The cap: ``reply_tokens`` (2000: a proposal with an edit of ``train.py``) for a model
  that does not reason; plus ``reasoning_allowance`` (6000) for one that does — an
  OpenAI reasoning family by name (o1, o3, o4, GPT-5, gpt-oss), a set
  ``reasoning_effort``, or a model whose replies reported reasoning tokens — because
  hidden reasoning counts against the completion cap. Not 8000 for every model: a
  local server that checks prompt + cap against its context (vLLM) would refuse it,
  and a local model looping to 8000 tokens would outlast the request timeout where
  stopping at 2000 gives a repairable cut-off reply. A reply that still comes back
  empty with finish reason ``length`` (reasoning spent the cap) is asked again once
  with twice the cap (``Usage.length_retries``); a second empty one is returned as it
  is, and the proposer sends it back as cut off.
- No ``temperature`` or ``top_p``: reasoning models refuse anything but the default.
  A ``seed`` per request (accepted by OpenAI's models; see ``request_seed``), and
  ``reasoning_effort`` only when the session sets it (``--llm-reasoning-effort``). A
  server that refuses either by name gets requests without it from then on.
- Structured output: the first request asks for ``json_schema`` (strict; the schema
  must require every property and forbid others, as OpenAI's strict mode demands). A
  server that refuses it (400 or 500 naming response_format, or any 400/500 before a
  first reply; llama.cpp's server answers 500) gets the same request again with
  ``{"type": "json_object", "schema": …}``, then with no response format (the schema
  is in the prompt anyway). The format of the first reply is kept for the session.
  No probe is sent: a schema-enforcing server could not answer a probe such as
  "Reply with {}" under a schema that requires fields. Replies are always validated
  locally anyway.
- Every step-down is counted (``Usage.stepdowns``) and said once through ``notify``.

Also:

- Timeouts and retries are explicit: an attempt that has no answer within ``timeout_s``
  is given up and sent again, up to ``max_retries`` times (the SDK's own retries back
  off on 429, 5xx and dropped connections). A given-up attempt is not cut: it runs on
  its own thread for up to ``LATE_WINDOW`` times the timeout, so a reply that arrives
  after the client stopped waiting is seen, charged (the server did the work) and kept
  in ``timed_out`` with what it said, for the proposer to tell the LLM it was discarded
  (``Usage.timeouts``, ``Usage.late_replies``).
- Before a session exists, ``check_endpoint`` sends one request of a few tokens to say
  in one line what keeps an endpoint from serving it (not a URL, nothing answers, the
  key refused, the model unknown).
- Every call's tokens (prompt, completion, cached, reasoning) and cost are counted and
  capped; replies are cached per session and key, so a repeated request (a resumed
  session) is not paid twice.
- The API key is read from a file or the environment and never passed to a trial.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import re
import threading
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from search.errors import LLMSetupError

PRICES_FILE = Path(__file__).with_name("llm_prices.toml")
# Model names of OpenAI's reasoning families (with or without a provider prefix such as "openai/").
REASONING_MODELS = re.compile(r"(^|/)(o\d|gpt-5|gpt-oss)", re.IGNORECASE)
FORMATS = ("json_schema", "json_object", "none")  # the response formats, in the order they are tried
CACHE_MODES = {"json_schema": True, "json_object": "json_object", "none": False}  # as older caches keyed them
# Parameters a request can do without when a server refuses them by name (max_completion_tokens: as max_tokens).
OPTIONAL_PARAMETERS = ("max_completion_tokens", "reasoning_effort", "seed")
REFUSAL_WORDS = ("unsupported", "unrecognized", "not supported", "extra inputs", "extra_forbidden", "unknown",
                 "not permitted", "unexpected")
# A given-up request goes on running for this many times its timeout, so that a late reply is seen.
LATE_WINDOW = 10
# The endpoint check: a request this small costs a few prompt tokens and one completion token.
PROBE_MESSAGES = [{"role": "user", "content": "Reply with OK."}]


class LLMUnavailable(Exception):
    """The endpoint failed after its retries (timeouts, 5xx storm, refused)."""


class LLMTimeout(LLMUnavailable):
    """No attempt of a request had an answer within the timeout (each is left running: ``LLMClient.timed_out``)."""


@dataclass
class TimedOut:
    """An attempt the client stopped waiting for, left running so that a late reply is seen."""

    key: str  # the request's step key (``a3.r0``: proposal 3, no repair yet)
    timeout_s: float
    arrived_s: float | None = None  # seconds from sending to the reply, once it came (it was discarded)
    content: str = ""  # what the late reply said
    failed: str = ""  # why no reply ever came, once the attempt ended without one

    @property
    def ended(self) -> bool:
        return self.arrived_s is not None or bool(self.failed)


@dataclass
class LLMSettings:
    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    max_retries: int = 3
    max_tokens: int | None = None
    max_cost: float | None = None
    reply_tokens: int = 2000  # the reply itself: a proposal with an edit of train.py
    reasoning_allowance: int = 6000  # on top, for a model that reasons (hidden reasoning counts against the cap)
    reasoning_effort: str | None = None  # sent only when set
    seed: int = 0  # with the request's step key, the per-request sampling seed


def read_api_key(key_file: Path | None) -> str | None:
    """The key from ``key_file`` if given, else ``OPENAI_API_KEY``."""
    if key_file is not None:
        try:
            return key_file.expanduser().read_text().strip()
        except OSError as exc:
            raise LLMSetupError(f"cannot read API key file {key_file}: {exc.strerror}") from exc
    return os.environ.get("OPENAI_API_KEY")


def load_prices(path: Path = PRICES_FILE) -> dict[str, dict[str, float]]:
    return tomllib.loads(path.read_text())


def check_price(model: str, max_cost: float | None, prices: dict | None = None) -> None:
    """A cost cap needs a known price; refuse at start rather than overspend."""
    if max_cost is not None and model not in (load_prices() if prices is None else prices):
        raise LLMSetupError(
            f"--max-llm-cost needs a price for model {model!r}; add it to {PRICES_FILE} "
            "or cap tokens with --max-llm-tokens"
        )


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost: float = 0.0
    cache_hits: int = 0
    length_retries: int = 0  # replies empty at the cap (reasoning spent it), asked again with twice the cap
    stepdowns: int = 0  # parameters or response formats a server refused, done without from then on
    timeouts: int = 0  # attempts given up after the timeout (each left running to see a late reply)
    late_replies: int = 0  # replies that arrived after their attempt was given up: charged, then discarded

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def restore(self, metrics: dict[str, float]) -> None:
        """Take up the counts a session logged before it stopped."""
        for name, value in asdict(self).items():
            if f"llm_{name}" in metrics:
                setattr(self, name, type(value)(metrics[f"llm_{name}"]))

    def as_metrics(self) -> dict[str, float]:
        return {f"llm_{k}": float(v) for k, v in asdict(self).items()} | {"llm_total_tokens": float(self.total_tokens)}


class ReplyCache:
    """Replies on disk (JSON lines), keyed by a caller key and a hash of the request."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: dict[str, dict] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                    self.entries[entry["key"]] = entry
                except (json.JSONDecodeError, KeyError):
                    continue  # a torn last line after a crash

    @staticmethod
    def key(step_key: str, request: dict) -> str:
        digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:16]
        return f"{step_key}:{digest}"

    def get(self, key: str) -> dict | None:
        return self.entries.get(key)

    def put(self, key: str, reply: dict) -> None:
        entry = {"key": key, **reply}
        self.entries[key] = entry
        with self.path.open("a") as handle:
            handle.write(json.dumps(entry) + "\n")


class LLMClient:
    def __init__(self, settings: LLMSettings, cache: ReplyCache | None = None, prices: dict | None = None,
                 tracer=None, notify=None):
        """``tracer(name)`` is a context manager yielding a span with set_inputs/set_outputs/
        set_attributes (the application passes MLflow tracing); by default nothing is traced.
        ``notify(text)`` hears each step-down once."""
        from openai import OpenAI

        self.settings = settings
        self.cache = cache
        self.usage = Usage()
        self.prices = load_prices() if prices is None else prices
        check_price(settings.model, settings.max_cost, self.prices)
        self.client = OpenAI(
            api_key=settings.api_key or "not-needed",
            base_url=settings.base_url,
            timeout=settings.timeout_s,
            max_retries=settings.max_retries,
        )
        self.structured: str | None = None  # the response format the server took (known from its first reply)
        self.token_parameter = "max_completion_tokens"  # max_tokens once a server refuses it
        self.refused: set[str] = set()  # optional parameters the server refused
        self.reasons = settings.reasoning_effort is not None or bool(REASONING_MODELS.search(settings.model))
        self.tracer = tracer or (lambda name: contextlib.nullcontext(_NoSpan()))
        self.notify = notify or (lambda text: None)
        self._told: set[str] = set()
        self.timed_out: list[TimedOut] = []  # given-up attempts, in order; a late reply fills one in
        self._lock = threading.RLock()  # usage is also charged from the thread of a late reply

    # -- budget -----------------------------------------------------------------------------

    def spent(self) -> str | None:
        """Why no further call may be made, or None."""
        s = self.settings
        if s.max_tokens is not None and self.usage.total_tokens >= s.max_tokens:
            return f"LLM token budget spent ({self.usage.total_tokens}/{s.max_tokens})"
        if s.max_cost is not None and self.usage.cost >= s.max_cost:
            return f"LLM cost budget spent (${self.usage.cost:.4f}/${s.max_cost:.2f})"
        return None

    def _charge(self, usage) -> dict[str, int]:
        prompt = getattr(usage, "prompt_tokens", 0) or 0
        completion = getattr(usage, "completion_tokens", 0) or 0
        cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", 0) or 0
        reasoning = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", 0) or 0
        with self._lock:
            self.usage.calls += 1
            self.usage.prompt_tokens += prompt
            self.usage.completion_tokens += completion
            self.usage.cached_tokens += cached
            self.usage.reasoning_tokens += reasoning
            price = self.prices.get(self.settings.model)
            if price:
                self.usage.cost += (
                    (prompt - cached) * price["input"] + cached * price.get("cached_input", price["input"])
                    + completion * price["output"]
                ) / 1e6
        return {"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached,
                "reasoning_tokens": reasoning}

    # -- calls ------------------------------------------------------------------------------

    def reply_cap(self) -> int:
        """The completion-token cap of a request: the reply, plus room to reason for a model that does."""
        return self.settings.reply_tokens + (self.settings.reasoning_allowance if self.reasons else 0)

    @staticmethod
    def _format(mode: str, schema: dict) -> dict | None:
        if mode == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": "proposal", "schema": schema, "strict": True}}
        if mode == "json_object":
            return {"type": "json_object", "schema": schema}
        return None

    @staticmethod
    def request_seed(seed: int, step_key: str) -> int:
        """A seed per request: a server that decodes deterministically returns the same reply
        to the same prompt, so a repair or a second attempt would get the same mistake back."""
        return int(hashlib.sha256(f"{seed}:{step_key}".encode()).hexdigest()[:8], 16)

    def _request(self, messages: list[dict], mode: str, schema: dict, cap: int, seed: int | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.settings.model, "messages": messages, self.token_parameter: cap}
        if response_format := self._format(mode, schema):
            kwargs["response_format"] = response_format
        if seed is not None and "seed" not in self.refused:
            kwargs["seed"] = seed
        if self.settings.reasoning_effort and "reasoning_effort" not in self.refused:
            kwargs["reasoning_effort"] = self.settings.reasoning_effort
        return kwargs

    def _send(self, kwargs: dict[str, Any], retries: int | None = None, step_key: str = ""):
        """One request: each attempt on its own thread, waited for ``timeout_s``; one with no answer
        by then is given up (and sent again while retries are left) but left running until
        ``LATE_WINDOW`` times the timeout, so that its reply, if it comes, is charged and recorded."""
        retries = self.settings.max_retries if retries is None else retries
        client = self.client.with_options(max_retries=retries, timeout=self.settings.timeout_s * LATE_WINDOW)
        for _ in range(retries + 1):
            attempt = _Attempt(lambda: client.chat.completions.create(**kwargs))
            record = TimedOut(step_key, self.settings.timeout_s)
            if attempt.wait(self.settings.timeout_s, lambda *outcome, record=record: self._late(record, *outcome)):
                response = attempt.result()
                return response, self._charge(response.usage)
            with self._lock:
                self.timed_out.append(record)
                self.usage.timeouts += 1
        raise LLMTimeout(f"no reply within {self.settings.timeout_s:g} s")

    def _late(self, record: TimedOut, response, error: BaseException | None, seconds: float) -> None:
        """What a given-up attempt brought back (on its own thread): a reply is charged and kept, then discarded."""
        with self._lock:
            if response is None:
                record.failed = f"{type(error).__name__} after {seconds:.0f} s"
                return
            self._charge(response.usage)
            self.usage.late_replies += 1
            choice = response.choices[0] if response.choices else None
            record.content = (choice.message.content if choice else "") or ""
            record.arrived_s = seconds

    @staticmethod
    def _error_text(exc) -> str:
        body = getattr(exc, "body", None)
        message = body.get("message") if isinstance(body, dict) else None
        return str(message if message is not None else getattr(exc, "message", exc)).lower()

    @classmethod
    def refused_parameter(cls, exc, kwargs: dict) -> str | None:
        """The parameter of ``kwargs`` that an HTTP 400 refuses, among those we can do without."""
        if getattr(exc, "status_code", None) not in (400, 422):
            return None
        candidates = [name for name in OPTIONAL_PARAMETERS if name in kwargs]
        if getattr(exc, "param", None) in candidates:  # OpenAI names it
            return exc.param
        text = cls._error_text(exc)
        if any(word in text for word in REFUSAL_WORDS):
            for name in candidates:
                if re.search(rf"\b{name}\b", text):
                    return name
        return None

    @classmethod
    def names_format(cls, exc) -> bool:
        text = cls._error_text(exc)
        return any(word in text for word in ("response_format", "json_schema", "json schema"))

    def _tell(self, text: str) -> None:
        if text not in self._told:
            self._told.add(text)
            self.notify(text)

    def _do_without(self, name: str, exc) -> None:
        """Step down from a refused parameter for the rest of the session."""
        self.usage.stepdowns += 1
        why = f"HTTP {exc.status_code}: {self._error_text(exc)[:120]}"
        if name == "max_completion_tokens":
            self.token_parameter = "max_tokens"
            self._tell(f"the LLM endpoint refused max_completion_tokens ({why}): sending max_tokens instead")
        else:
            self.refused.add(name)
            self._tell(f"the LLM endpoint refused {name} ({why}): sending requests without it")

    def _step_down_format(self, mode: str, exc) -> str:
        following = FORMATS[FORMATS.index(mode) + 1]
        self.usage.stepdowns += 1
        how = {"json_object": "json_object with the schema inside", "none": "the schema in the prompt only"}[following]
        self._tell(f"the LLM endpoint refused response_format {mode} (HTTP {exc.status_code}): asking with {how}")
        return following

    def _call(self, messages: list[dict], schema: dict, seed: int | None,
              step_key: str = "") -> tuple[Any, dict[str, int], str]:
        """Send one request, stepping down from what the server refuses, and once more with twice
        the cap when a reply comes back empty at it. Returns the response, the usage of every
        attempt together, and the response format that was taken."""
        import openai

        mode = self.structured or FORMATS[0]
        cap = self.reply_cap()
        retried_long = transient = False
        total: dict[str, int] = {}
        while True:
            # Until a reply has come back, a structured format is tried without the SDK's retries: a server
            # that cannot take it answers 400 or 500 at once, and a 500 should not be retried with back-off.
            probing = self.structured is None and mode != FORMATS[-1]
            retries = (self.settings.max_retries - 1 if transient else 0) if probing else None
            kwargs = self._request(messages, mode, schema, cap, seed)
            try:
                response, usage = self._send(kwargs, retries, step_key)
            except openai.APIStatusError as exc:
                if name := self.refused_parameter(exc, kwargs):
                    self._do_without(name, exc)
                    continue
                if mode != FORMATS[-1] and exc.status_code in (400, 500) and (probing or self.names_format(exc)):
                    mode, transient = self._step_down_format(mode, exc), False
                    continue
                if probing and not transient and self.settings.max_retries > 0:
                    transient = True  # 429, 502, …: the same request again, with the retries left
                    continue
                raise
            except (openai.APIConnectionError, LLMTimeout):
                if probing and not transient and self.settings.max_retries > 0:
                    transient = True
                    continue
                raise
            self.structured = mode
            total = {key: total.get(key, 0) + value for key, value in usage.items()}
            if usage["reasoning_tokens"]:
                self.reasons = True
            choice = response.choices[0] if response.choices else None
            empty = not (choice and choice.message.content)
            if empty and choice is not None and choice.finish_reason == "length" and not retried_long:
                # Reasoning spent the whole cap before the reply began: once more with twice the room.
                retried_long, self.reasons = True, True
                self.usage.length_retries += 1
                cap *= 2
                continue
            return response, total, mode

    def _cache_request(self, messages: list[dict], mode: str) -> dict:
        request = {"model": self.settings.model, "messages": messages, "structured": CACHE_MODES[mode]}
        if self.settings.reasoning_effort:
            request["reasoning_effort"] = self.settings.reasoning_effort
        return request

    def cached(self, messages: list[dict], step_key: str) -> dict | None:
        """The cached reply to this request, under the response format the server takes; before that
        is known (a resumed session), under any, and the format of the hit is taken as known."""
        if not self.cache:
            return None
        for mode in [self.structured] if self.structured else FORMATS:
            if hit := self.cache.get(ReplyCache.key(step_key, self._cache_request(messages, mode))):
                self.structured = mode
                return hit
        return None

    def complete(self, messages: list[dict], schema: dict, step_key: str) -> dict:
        """One reply: ``{"content", "usage", "cached", "finish_reason"}``. Raises LLMUnavailable."""
        import openai

        if hit := self.cached(messages, step_key):
            self.usage.cache_hits += 1
            return {**hit, "cached": True}
        with self.tracer(f"propose {step_key}") as span:
            span.set_inputs({"messages": messages, "model": self.settings.model, "structured": self.structured})
            try:
                response, usage, mode = self._call(messages, schema, self.request_seed(self.settings.seed, step_key),
                                                   step_key)
            except LLMTimeout as exc:
                span.set_attributes({"error": str(exc)})
                raise
            except (openai.APIError, openai.APIConnectionError) as exc:
                span.set_attributes({"error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                raise LLMUnavailable(f"{type(exc).__name__}: {str(exc)[:200]}") from exc
            choice = response.choices[0] if response.choices else None
            reply = {
                "content": (choice.message.content if choice else "") or "",
                "finish_reason": choice.finish_reason if choice else None,
                "usage": usage,
            }
            span.set_outputs(reply)
            span.set_attributes({**reply["usage"], "structured": mode, "token_parameter": self.token_parameter,
                                 "total_cost_usd": self.usage.cost})
        if self.cache:
            self.cache.put(ReplyCache.key(step_key, self._cache_request(messages, mode)), reply)
        return {**reply, "cached": False}


class _Attempt:
    """One HTTP attempt on a thread of its own. ``wait`` says whether it ended within the time;
    if not, what it brings back later goes to the ``late`` callback (on its thread) instead."""

    def __init__(self, call):
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._done = False
        self._ended = threading.Event()
        self._late = None
        self._response = self._error = None
        context = contextvars.copy_context()  # a tracer's span, if any, stays the current one
        threading.Thread(target=context.run, args=(self._run, call), daemon=True, name="llm-request").start()

    def _run(self, call) -> None:
        response = error = None
        try:
            response = call()
        except BaseException as exc:  # handed to whoever waits, or recorded as late
            error = exc
        with self._lock:
            self._response, self._error, self._done = response, error, True
            late = self._late
        self._ended.set()
        if late is not None:
            late(response, error, time.monotonic() - self.started)

    def wait(self, timeout: float, late) -> bool:
        self._ended.wait(timeout)
        with self._lock:
            if not self._done:
                self._late = late
            return self._done

    def result(self):
        if self._error is not None:
            raise self._error
        return self._response


def check_endpoint(settings: LLMSettings) -> str | None:
    """What keeps this endpoint from serving a session, in one line that says what to do; None
    when it answers.

    One chat-completion request of a few tokens (``max_completion_tokens`` 1, no response
    format, no retries, within ``timeout_s``), not ``GET /models``: the server itself then
    decides the three things a session needs — the route, the key and the model — where a
    model listing can disagree with what a server takes (llama.cpp's server lists one name
    and answers to any; proxies list what they route differently). An answer that refuses a
    parameter (400), or a busy or failing server (429, 5xx), is an endpoint that answers: the
    session's own requests step down or retry. Nothing of the key is ever in the message.
    """
    import openai

    url = settings.base_url
    if url is not None:
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            return f"--llm-base-url {url!r} is not a URL; pass one such as http://localhost:8000/v1"
    client = openai.OpenAI(api_key=settings.api_key or "not-needed", base_url=url, timeout=settings.timeout_s,
                           max_retries=0)
    shown = str(client.base_url).rstrip("/")
    where = f"--llm-base-url {shown}" if url is not None else f"the LLM endpoint {shown}"
    if not settings.api_key and client.base_url.host == "api.openai.com":
        return ("no API key for the OpenAI API: set $OPENAI_API_KEY or pass --llm-key-file FILE "
                "(for a local server, pass --llm-base-url URL)")
    try:
        client.chat.completions.create(model=settings.model, messages=PROBE_MESSAGES, max_completion_tokens=1)
    except openai.APITimeoutError:
        return (f"{where}: no reply within {settings.timeout_s:g} s (--llm-timeout); start the server, pass another "
                "URL or raise --llm-timeout")
    except openai.APIConnectionError as exc:
        return f"{where}: nothing answers ({connection_problem(exc)}); start the server or pass another URL"
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        if not settings.api_key:
            return (f"the LLM endpoint {shown} asks for a key (HTTP {exc.status_code}); set $OPENAI_API_KEY or pass "
                    "--llm-key-file FILE")
        return (f"the LLM endpoint {shown} refused the key (HTTP {exc.status_code}); check --llm-key-file or "
                "$OPENAI_API_KEY")
    except openai.NotFoundError as exc:
        if "model" in LLMClient._error_text(exc):
            return f"model {settings.model!r} is not served at {shown} (HTTP 404); pass --llm MODEL with one it serves"
        return (f"{where}: no chat completions there (HTTP 404 on POST {exc.request.url.path}); an OpenAI-compatible "
                "base URL usually ends in /v1")
    except openai.RateLimitError as exc:
        if exc.code == "insufficient_quota":
            return (f"the LLM endpoint {shown} says the key has no quota left (HTTP 429 insufficient_quota); add "
                    "credit or pass another key")
    except openai.APIStatusError:
        pass
    return None


def connection_problem(exc: BaseException) -> str:
    """The network's own words for a failed connection (``connection refused``), without errno noise."""
    cause = exc.__cause__ or exc.__context__ or exc
    text = re.sub(r"\[Errno -?\d+\]\s*", "", str(cause).strip().splitlines()[0] if str(cause).strip() else "")
    return (text or type(cause).__name__).rstrip(".").lower()


class _NoSpan:
    def set_inputs(self, value) -> None: ...

    def set_outputs(self, value) -> None: ...

    def set_attributes(self, value) -> None: ...
