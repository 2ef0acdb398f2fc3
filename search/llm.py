"""The LLM client: any OpenAI-compatible endpoint through the ``openai`` package.

- Timeouts and retries are explicit (the SDK's timeout is per attempt; retries back
  off on 429, 5xx and timeouts).
- Structured output is probed once: servers that enforce a JSON schema get one, the
  others get the schema in the prompt. Replies are always validated locally anyway.
- Every call's tokens (prompt, completion, cached, reasoning) and cost are counted and
  capped; replies are cached per session and key, so a repeated request (a resumed
  session) is not paid twice.
- The API key is read from a file or the environment and never passed to a trial.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from search.errors import LLMSetupError

PRICES_FILE = Path(__file__).with_name("llm_prices.toml")


class LLMUnavailable(Exception):
    """The endpoint failed after its retries (timeouts, 5xx storm, refused)."""


@dataclass
class LLMSettings:
    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    max_retries: int = 3
    max_tokens: int | None = None
    max_cost: float | None = None
    reply_tokens: int = 2000
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
            f"--max-llm-cost needs a price for model {model!r}; add it to {PRICES_FILE} or cap tokens with --max-llm-tokens"
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
                 tracer=None):
        """``tracer(name)`` is a context manager yielding a span with set_inputs/set_outputs/
        set_attributes (the application passes MLflow tracing); by default nothing is traced."""
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
        self.structured: str | None = None  # the response format the server takes (probed once)
        self.tracer = tracer or (lambda name: contextlib.nullcontext(_NoSpan()))

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

    def probe_structured_output(self, schema: dict) -> str:
        """The response format the server takes, asked once per client: ``json_schema``
        (OpenAI), ``json_object`` with the schema inside (llama.cpp answers HTTP 500 to
        the first), or ``none`` (prompted JSON). Replies are validated locally whichever it is."""
        if self.structured is None:
            import openai

            self.structured = "none"
            for mode in ("json_schema", "json_object"):
                try:
                    self._create([{"role": "user", "content": "Reply with {}."}], self._format(mode, schema),
                                 max_tokens=16, retries=0)
                except (openai.APIError, openai.APIConnectionError):
                    continue  # refused (400), or crashed on it (500): try the next, then plain prompting
                self.structured = mode
                break
        return self.structured

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

    def _create(self, messages: list[dict], response_format: dict | None, max_tokens: int, seed: int | None = None,
                retries: int | None = None):
        kwargs: dict[str, Any] = {"model": self.settings.model, "messages": messages, "max_tokens": max_tokens}
        if response_format:
            kwargs["response_format"] = response_format
        if seed is not None:
            kwargs["seed"] = seed
        client = self.client if retries is None else self.client.with_options(max_retries=retries)
        response = client.chat.completions.create(**kwargs)
        return response, self._charge(response.usage)

    def complete(self, messages: list[dict], schema: dict, step_key: str) -> dict:
        """One reply: ``{"content", "usage", "cached", "finish_reason"}``. Raises LLMUnavailable."""
        import openai

        structured = self.probe_structured_output(schema)
        cache_mode = {"json_schema": True, "none": False}.get(structured, structured)  # keys of older caches
        request = {"model": self.settings.model, "messages": messages, "structured": cache_mode}
        key = ReplyCache.key(step_key, request)
        if self.cache and (hit := self.cache.get(key)):
            self.usage.cache_hits += 1
            return {**hit, "cached": True}
        with self.tracer(f"propose {step_key}") as span:
            span.set_inputs({"messages": messages, "model": self.settings.model, "structured": structured})
            try:
                response, usage = self._create(messages, self._format(structured, schema), self.settings.reply_tokens,
                                               seed=self.request_seed(self.settings.seed, step_key))
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
            span.set_attributes({**reply["usage"], "total_cost_usd": self.usage.cost})
        if self.cache:
            self.cache.put(key, reply)
        return {**reply, "cached": False}


class _NoSpan:
    def set_inputs(self, value) -> None: ...

    def set_outputs(self, value) -> None: ...

    def set_attributes(self, value) -> None: ...
