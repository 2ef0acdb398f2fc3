"""The LLM client against a loopback server as strict as the one it stands in for.

What a request carries (max_completion_tokens, reasoning_effort, a response format),
what is done without when a server refuses it, and the retry of a reply that reasoning
left empty at the cap.
"""

import json
import threading

import openai
import pytest
from llm_server import MAX_TOKENS_REFUSAL, Answer, LLMServer, ScriptedLLM, strict_schema_errors

from autorl.config import make_config
from autorl.errors import ConfigError
from autorl.stages import template as templates
from search.llm import LLMClient, LLMSettings, LLMTimeout, LLMUnavailable, ReplyCache, check_endpoint
from search.proposers.llm import reply_schema

SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["parent", "rationale"],
    "properties": {"parent": {"type": "string"}, "rationale": {"type": "string"}},
}
REPLY = json.dumps({"parent": "base", "rationale": "start from the base model"})
MESSAGES = [{"role": "system", "content": "Reply with one JSON object."}, {"role": "user", "content": "Propose."}]


def make_client(server, model="scripted", notices=None, cache=None, prices=None, **settings):
    settings = LLMSettings(**{"model": model, "base_url": server.url, "api_key": "sk-test", "timeout_s": 2.0,
                              "max_retries": 1, **settings})
    return LLMClient(settings, cache=cache, prices=prices, notify=(notices.append if notices is not None else None))


def ask(client, key="a1.r0", messages=MESSAGES):
    return client.complete(messages, SCHEMA, step_key=key)


def test_a_reasoning_model_gets_max_completion_tokens_never_max_tokens():
    llm = ScriptedLLM(flavour="openai-reasoning", check_content=True).add(
        Answer(REPLY, reasoning_tokens=1500), Answer(REPLY, reasoning_tokens=2500))
    with LLMServer(llm) as server:
        client = make_client(server, model="o4-mini")
        assert ask(client, "a1.r0")["content"] == REPLY and ask(client, "a2.r0")["content"] == REPLY
    assert llm.refusals == [] and llm.violations == []
    for request in llm.requests:
        # reply_tokens + the reasoning allowance; nothing a reasoning model refuses
        assert request["max_completion_tokens"] == 8000 and not {"max_tokens", "temperature", "top_p"} & set(request)
        assert request["response_format"]["type"] == "json_schema" and "seed" in request
    usage = client.usage
    assert (usage.calls, usage.reasoning_tokens, usage.completion_tokens) == (2, 4000, 4080)
    assert (usage.stepdowns, usage.length_retries) == (0, 0)


def test_the_reasoning_allowance_comes_once_replies_report_reasoning():
    llm = ScriptedLLM(flavour="openai-reasoning").add(Answer(REPLY, reasoning_tokens=800), REPLY)
    with LLMServer(llm) as server:
        client = make_client(server)  # a name that says nothing about reasoning
        ask(client, "a1.r0")
        ask(client, "a2.r0")
    assert [r["max_completion_tokens"] for r in llm.requests] == [2000, 8000]


def test_the_openai_reasoning_stand_in_refuses_what_openai_refuses():
    with LLMServer(ScriptedLLM(flavour="openai-reasoning").add(REPLY)) as server:
        raw = openai.OpenAI(api_key="sk-test", base_url=server.url, max_retries=0)
        refusals = [
            dict(max_tokens=100),
            dict(max_completion_tokens=100, temperature=0.2),
            dict(max_completion_tokens=100, reasoning_effort="extreme"),
            dict(max_completion_tokens=100, extra_body={"guided_json": {}}),
            dict(max_completion_tokens=100, response_format={"type": "json_schema", "json_schema": {
                "name": "proposal", "strict": True, "schema": {**SCHEMA, "required": ["parent"]}}}),
        ]
        errors = []
        for kwargs in refusals:
            with pytest.raises(openai.BadRequestError) as caught:
                raw.chat.completions.create(model="o4-mini", messages=MESSAGES, **kwargs)
            errors.append(caught.value)
        raw.chat.completions.create(model="o4-mini", messages=MESSAGES, max_completion_tokens=100,
                                    reasoning_effort="minimal", seed=1)
    assert errors[0].body == MAX_TOKENS_REFUSAL["error"]  # OpenAI's exact body
    assert [e.param for e in errors] == ["max_tokens", "temperature", "reasoning_effort", None, "response_format"]
    assert "Unrecognized request argument supplied: guided_json" in errors[3].message
    assert "Missing 'rationale'" in errors[4].message


def test_the_proposal_schemas_pass_openai_strict_rules():
    space = templates.load("arith").space
    assert strict_schema_errors(reply_schema(space)) == []
    assert strict_schema_errors({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})
    try:
        llm_schema = reply_schema(space, hybrid=False)
    except TypeError:  # one schema for both strategies
        return
    assert strict_schema_errors(llm_schema) == []


def test_a_legacy_server_gets_max_tokens_once_refused_and_from_then_on():
    notices = []
    llm = ScriptedLLM(flavour="legacy").add(REPLY, REPLY, REPLY)
    with LLMServer(llm) as server:
        client = make_client(server, notices=notices)
        for key in ("a1.r0", "a2.r0", "a3.r0"):
            assert ask(client, key)["content"] == REPLY
    assert [("max_completion_tokens" in r, "max_tokens" in r) for r in llm.requests] == [
        (True, False), (False, True), (False, True), (False, True)]
    assert llm.requests[0]["messages"] == llm.requests[1]["messages"]  # the same request, sent again
    assert llm.requests[0]["seed"] == llm.requests[1]["seed"]
    assert llm.refusals == [(400, "Unrecognized request argument supplied: max_completion_tokens")]
    assert client.usage.stepdowns == 1 and client.usage.calls == 3 and client.token_parameter == "max_tokens"
    assert len(notices) == 1 and "sending max_tokens instead" in notices[0]


def test_a_reply_empty_at_the_cap_is_asked_again_once_with_twice_the_cap():
    llm = ScriptedLLM(flavour="openai-reasoning").add(
        Answer(REPLY, reasoning_tokens=9000), Answer(REPLY, reasoning_tokens=9000),  # fits in 16000, not 8000
        Answer(REPLY, reasoning_tokens=20000), Answer(REPLY, reasoning_tokens=20000),  # fits in neither
    )
    with LLMServer(llm) as server:
        client = make_client(server, model="gpt-5-mini")
        first = ask(client, "a1.r0")
        second = ask(client, "a2.r0")
    assert first["content"] == REPLY and first["finish_reason"] == "stop"
    assert first["usage"]["completion_tokens"] == 8000 + 9040  # both attempts, as paid
    assert second["content"] == "" and second["finish_reason"] == "length"  # returned as it is
    assert [r["max_completion_tokens"] for r in llm.requests] == [8000, 16000, 8000, 16000]
    assert client.usage.length_retries == 2 and client.usage.calls == 4
    assert client.usage.as_metrics()["llm_length_retries"] == 2.0


def test_a_reply_cut_with_content_is_not_asked_again():
    llm = ScriptedLLM().add(Answer(REPLY[:10], finish_reason="length"))
    with LLMServer(llm) as server:
        client = make_client(server)
        reply = ask(client)
    assert reply["content"] == REPLY[:10] and len(llm.requests) == 1 and client.usage.length_retries == 0


def test_reasoning_effort_is_sent_only_when_set():
    llm = ScriptedLLM(flavour="openai-reasoning").add(REPLY, REPLY)
    with LLMServer(llm) as server:
        ask(make_client(server, model="o3"))
        ask(make_client(server, model="o3", reasoning_effort="high"))
    assert "reasoning_effort" not in llm.requests[0] and llm.requests[1]["reasoning_effort"] == "high"
    assert llm.refusals == []


def test_a_model_that_does_not_reason_refuses_reasoning_effort_and_goes_without():
    notices = []
    llm = ScriptedLLM(flavour="openai").add(REPLY, REPLY)
    with LLMServer(llm) as server:
        client = make_client(server, model="gpt-4o-mini", notices=notices, reasoning_effort="low")
        ask(client, "a1.r0")
        ask(client, "a2.r0")
    assert ["reasoning_effort" in r for r in llm.requests] == [True, False, False]
    assert client.usage.stepdowns == 1 and len(notices) == 1 and "reasoning_effort" in notices[0]


def test_the_reasoning_effort_option_is_validated(tmp_path):
    base = dict(name="s", topic="t", template="arith", runs_dir=tmp_path, tracking_uri="x")
    assert make_config(**base).llm_reasoning_effort is None
    assert make_config(**base, llm_reasoning_effort="medium").llm_reasoning_effort == "medium"
    with pytest.raises(ConfigError, match="--llm-reasoning-effort: "):
        make_config(**base, llm_reasoning_effort="extreme")


def test_the_llm_fallback_option_is_validated_and_stops_by_default(tmp_path):
    base = dict(name="s", topic="t", template="arith", runs_dir=tmp_path, tracking_uri="x")
    assert make_config(**base).llm_fallback == "none"
    assert make_config(**base, llm_fallback="optuna").llm_fallback == "optuna"
    with pytest.raises(ConfigError, match="--llm-fallback: unknown llm-fallback 'maybe'; choose one of none, optuna"):
        make_config(**base, llm_fallback="maybe")


def test_json_schema_refused_then_json_object_then_none_the_mode_remembered():
    notices = []
    llm = ScriptedLLM(supports_schema=False).add(REPLY, REPLY)
    with LLMServer(llm) as server:
        client = make_client(server, notices=notices)
        assert ask(client, "a1.r0")["content"] == REPLY
        assert ask(client, "a2.r0")["content"] == REPLY
    formats = [(r.get("response_format") or {}).get("type") for r in llm.requests]
    assert formats == ["json_schema", "json_object", None, None]
    first_three = llm.requests[:3]
    assert all(r["messages"] == MESSAGES and r["seed"] == first_three[0]["seed"] for r in first_three)
    assert client.structured == "none" and client.usage.stepdowns == 2 and client.usage.calls == 2
    assert len(notices) == 2 and "json_schema" in notices[0] and "json_object" in notices[1]


def test_a_llama_cpp_style_500_on_json_schema_is_not_retried_with_backoff():
    llm = ScriptedLLM(supports_schema="json_object").add(REPLY, REPLY)
    with LLMServer(llm) as server:
        client = make_client(server, max_retries=3)
        ask(client, "a1.r0")
        ask(client, "a2.r0")
    assert [r["response_format"]["type"] for r in llm.requests] == ["json_schema", "json_object", "json_object"]
    assert llm.requests[1]["response_format"]["schema"] == SCHEMA and client.structured == "json_object"


def test_a_refusal_after_the_first_reply_does_not_step_down_unless_it_names_the_format():
    llm = ScriptedLLM().add(REPLY, Answer(status=400, content="context length exceeded"), REPLY)
    with LLMServer(llm) as server:
        client = make_client(server)
        ask(client, "a1.r0")
        with pytest.raises(LLMUnavailable, match="context length exceeded"):
            ask(client, "a2.r0")
        ask(client, "a3.r0")
    assert all(r["response_format"]["type"] == "json_schema" for r in llm.requests)
    assert client.structured == "json_schema" and client.usage.stepdowns == 0


def test_cached_and_reasoning_tokens_are_counted_and_priced():
    prices = {"scripted": {"input": 1.0, "cached_input": 0.1, "output": 2.0}}
    llm = ScriptedLLM(flavour="openai-reasoning").add(
        Answer(REPLY, prompt_tokens=1000, cached_tokens=600, completion_tokens=40, reasoning_tokens=300))
    with LLMServer(llm) as server:
        client = make_client(server, prices=prices)
        reply = ask(client)
    assert reply["usage"] == {"prompt_tokens": 1000, "completion_tokens": 340, "cached_tokens": 600,
                              "reasoning_tokens": 300}
    usage = client.usage
    assert (usage.cached_tokens, usage.reasoning_tokens) == (600, 300)
    assert usage.cost == pytest.approx((400 * 1.0 + 600 * 0.1 + 340 * 2.0) / 1e6)
    metrics = usage.as_metrics()
    assert metrics["llm_cached_tokens"] == 600 and metrics["llm_stepdowns"] == 0


def test_a_cached_reply_is_found_before_the_format_is_known(tmp_path):
    cache = ReplyCache(tmp_path / "replies.jsonl")
    llm = ScriptedLLM(supports_schema=False).add(REPLY)
    with LLMServer(llm) as server:
        ask(make_client(server, cache=cache))
    assert len(llm.requests) == 3
    # An older session's key (structured: False for prompted JSON) is the same key.
    legacy_key = ReplyCache.key("a1.r0", {"model": "scripted", "messages": MESSAGES, "structured": False})
    assert legacy_key in cache.entries
    with LLMServer(ScriptedLLM()) as server:  # a resumed session: nothing would be answered
        again = make_client(server, cache=ReplyCache(tmp_path / "replies.jsonl"))
        reply = ask(again)
        assert reply["cached"] and reply["content"] == REPLY and server.llm.requests == []
    assert again.structured == "none" and again.usage.cache_hits == 1


# -- the endpoint check before a session exists ---------------------------------------------------------------


def closed_port_url() -> str:
    """A loopback URL where nothing listens (the port was free a moment ago)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def probe(base_url, model="gpt-4o-mini", api_key="sk-right-key-1234", timeout_s=5.0):
    return check_endpoint(LLMSettings(model=model, base_url=base_url, api_key=api_key, timeout_s=timeout_s))


def test_the_endpoint_check_is_one_tiny_request_and_passes_a_server_that_answers():
    llm = ScriptedLLM(api_key="sk-right-key-1234", models=("gpt-4o-mini",)).add(REPLY)
    with LLMServer(llm) as server:
        assert probe(server.url) is None
    assert llm.requests == [] and list(llm.script) != [] and len(llm.probes) == 1  # no scripted answer used
    (sent,) = llm.probes
    assert sent["max_completion_tokens"] == 1 and "response_format" not in sent and len(json.dumps(sent)) < 200


def test_a_server_that_refuses_a_parameter_of_the_check_still_answers():
    legacy = ScriptedLLM(flavour="legacy")
    with LLMServer(legacy) as server:
        assert probe(server.url) is None  # 400 on max_completion_tokens: the session's requests step down
    assert legacy.refusals == [(400, "Unrecognized request argument supplied: max_completion_tokens")]


@pytest.mark.parametrize(("key", "expected"), [
    ("sk-wrong-secret-9876", "refused the key (HTTP 401); check --llm-key-file or $OPENAI_API_KEY"),
    (None, "asks for a key (HTTP 401); set $OPENAI_API_KEY or pass --llm-key-file FILE"),
])
def test_a_refused_key_is_one_line_that_never_shows_the_key(key, expected):
    llm = ScriptedLLM(api_key="sk-right-key-1234")
    with LLMServer(llm) as server:
        problem = probe(server.url, api_key=key)
    assert problem == f"the LLM endpoint {server.url} {expected}"
    assert "Incorrect API key" in llm.refusals[0][1]  # the server's message shows the key, masked
    assert "9876" not in problem and "secret" not in problem and "*" not in problem


def test_an_unknown_model_and_a_wrong_route_are_told_apart():
    llm = ScriptedLLM(models=("gpt-4o-mini",))
    with LLMServer(llm) as server:
        model = probe(server.url, model="gpt-9")
        route = probe(server.url.removesuffix("/v1"))
    assert model == f"model 'gpt-9' is not served at {server.url} (HTTP 404); pass --llm MODEL with one it serves"
    assert route == (f"--llm-base-url {server.url.removesuffix('/v1')}: no chat completions there (HTTP 404 on POST "
                     "/chat/completions); an OpenAI-compatible base URL usually ends in /v1")


def test_nothing_answering_not_a_url_and_no_key_are_one_line_each(monkeypatch):
    url = closed_port_url()
    assert probe(url) == f"--llm-base-url {url}: nothing answers (connection refused); start the server or pass " \
                         "another URL"
    assert probe("localhost:8000") == ("--llm-base-url 'localhost:8000' is not a URL; pass one such as "
                                       "http://localhost:8000/v1")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert probe(None, api_key=None).startswith("no API key for the OpenAI API: set $OPENAI_API_KEY or pass "
                                                "--llm-key-file FILE")


def test_a_server_that_never_replies_is_told_within_the_timeout():
    import socket
    import time

    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        started = time.monotonic()
        problem = probe(url, timeout_s=0.5)
        waited = time.monotonic() - started
    assert problem == (f"--llm-base-url {url}: no reply within 0.5 s (--llm-timeout); start the server, pass another "
                       "URL or raise --llm-timeout")
    assert waited < 5  # one attempt, no retries


# -- a reply after the timeout ----------------------------------------------------------------------------------


def test_a_reply_after_the_timeout_is_seen_charged_and_kept_not_dropped():
    from conftest import wait_until

    release = threading.Event()
    llm = ScriptedLLM().add(Answer(REPLY, hold=release))
    with LLMServer(llm) as server:
        client = make_client(server, timeout_s=0.5, max_retries=0)
        try:
            with pytest.raises(LLMTimeout, match="no reply within 0.5 s"):
                ask(client)
            (record,) = client.timed_out
            assert (record.key, record.timeout_s, record.ended) == ("a1.r0", 0.5, False)
            assert (client.usage.timeouts, client.usage.late_replies, client.usage.calls) == (1, 0, 0)
        finally:
            release.set()
        wait_until(lambda: record.ended, "the late reply is recorded", timeout=30)
    assert record.content == REPLY and record.arrived_s >= 0.5 and not record.failed
    assert (client.usage.late_replies, client.usage.calls, client.usage.completion_tokens) == (1, 1, 40)
    assert client.usage.as_metrics()["llm_late_replies"] == 1.0 and len(llm.requests) == 1
