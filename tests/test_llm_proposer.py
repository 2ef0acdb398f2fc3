"""The LLM proposer against a real OpenAI-compatible server on loopback.

Every bad reply ends the way the design says: repaired with the exact error, or
dropped and counted, or replaced by an Optuna proposal when the endpoint is down or
the budget is spent. Nothing raises past the proposer except ProposalDropped.
"""

import json

import pytest
from llm_server import Answer, LLMServer, ScriptedLLM

from autorl.stages import template as templates
from autorl.stages.workspace import Workspace
from search import study as hpo
from search.context import ContextBuilder
from search.llm import LLMClient, LLMSettings, ReplyCache
from search.policy import BestFirstPolicy
from search.proposers.base import ProposalDropped
from search.proposers.llm import LLMProposer, reply_schema
from search.tree import Comparison, Node, Status, Tree

TEMPLATE = templates.load("arith")


def reply(parent="n001", edit=None, search=None, **values):
    """A reply as the ``llm`` strategy's schema has it; ``search`` (hybrid only) when given."""
    hyperparameters = {**TEMPLATE.space.defaults(), "learning_rate": 1e-4, **values}
    return json.dumps({"parent": parent, "hyperparameters": hyperparameters, "edit": edit or [],
                       "rationale": "reward still rising", "expected_effect": "+2 points"}
                      | ({"search": search} if search is not None else {}))


@pytest.fixture
def workspace(tmp_path):
    return Workspace.create(TEMPLATE, tmp_path / "ws")


@pytest.fixture
def tree(workspace):
    tree = Tree(base_score=0.53, base_stderr=0.016)
    tree.add(Node("n001", None, 1, TEMPLATE.space.defaults(), seed=1, proposer="optuna", commit=workspace.root_commit,
                  status=Status.SUCCEEDED, val_score=0.6, val_stderr=0.015))
    tree.add(Node("n002", "n001", 2, TEMPLATE.space.defaults(), seed=2, proposer="optuna",
                  commit=workspace.root_commit, status=Status.FAILED, reason="crashed"))
    return tree


@pytest.fixture
def make_proposer(tmp_path, workspace):
    notices = []

    def build(server, hybrid=False, cache=True, **settings):
        client = LLMClient(
            LLMSettings(**{"model": "scripted", "base_url": server.url, "api_key": "sk-test", "timeout_s": 1.0,
                           "max_retries": 1, **settings}),
            cache=ReplyCache(tmp_path / "replies.jsonl") if cache else None,
        )
        context = ContextBuilder(TEMPLATE.program, "beat 60%", TEMPLATE.space, curves=lambda node_id: "reward rising")
        study = hpo.open_study(tmp_path, "s", seed=0)
        proposer = LLMProposer(TEMPLATE.space, client, context, study, workspace=workspace,
                               hybrid=hybrid, notify=notices.append)
        proposer.notices = notices
        return proposer

    return build


def serve(*answers, supports_schema=True):
    return LLMServer(ScriptedLLM(supports_schema=supports_schema).add(*answers))


def test_valid_proposal(make_proposer, tree):
    with serve(reply(parent="n001", temperature=0.8)) as server:
        proposer = make_proposer(server)
        proposal = proposer.propose(tree, "n001")
    assert proposal.parent == "n001" and proposal.hyperparameters["temperature"] == 0.8
    assert proposal.train_py is None and proposal.rationale == "reward still rising"
    request = server.llm.requests[0]
    assert request["response_format"]["type"] == "json_schema"  # the server enforces schemas
    prompt = request["messages"][1]["content"]
    assert "beat 60%" in prompt and "n001" in prompt and "GRPOTrainer" in prompt and "learning_rate" in prompt
    assert request["max_completion_tokens"] == 2000 and "max_tokens" not in request  # no probe: one call
    usage = proposer.client.usage
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (1, 120, 40, 20)


def test_base_parent_and_edit_applied(make_proposer, tree, workspace):
    edit = [{"file": "train.py", "search": "per_device_train_batch_size=micro",
             "replace": "per_device_train_batch_size=32"}]
    with serve(reply(parent="base", edit=edit)) as server:
        proposal = make_proposer(server).propose(tree, "n001")
    assert proposal.parent is None
    assert "per_device_train_batch_size=32" in proposal.train_py
    assert workspace.train_script.read_text().count("per_device_train_batch_size=micro") == 1  # nothing written yet


@pytest.mark.parametrize(("bad", "error"), [
    (reply(edit=[{"file": "train.py", "search": "no such line", "replace": "x"}]), "does not occur"),
    (reply(edit=[{"file": "train.py", "search": "def main() -> None:", "replace": "def main(:"}]), "does not parse"),
    (reply(edit=[{"file": "env/task.py", "search": "1.0", "replace": "2.0"}]), "only train.py may be edited"),
    (reply(learning_rate=0.5), "outside"),
    (reply(parent="n042"), "'n042' is not in the tree"),
    (reply(parent="n002"), "cannot be extended"),
    ("Sure! I think we should raise the learning rate.", "not valid JSON"),
    (reply()[:80], "not valid JSON"),
    (json.dumps({"parent": "n001", "hyperparameters": {}, "bonus": 1}), "does not match the schema"),
])
def test_invalid_reply_is_repaired_with_the_exact_error(make_proposer, tree, bad, error):
    with serve(bad, reply()) as server:
        proposal = make_proposer(server).propose(tree, "n001")
    assert proposal.hyperparameters["learning_rate"] == 1e-4
    repair = server.llm.requests[1]["messages"][-1]["content"]
    assert error in repair and server.llm.requests[1]["messages"][-2]["content"] == bad


def test_truncated_reply_is_repaired(make_proposer, tree):
    with serve(Answer(content=reply()[:-1], finish_reason="length"), reply()) as server:
        make_proposer(server).propose(tree, "n001")
    assert "cut off" in server.llm.requests[1]["messages"][-1]["content"]


def test_a_reply_reasoning_left_empty_twice_goes_back_as_cut_off(make_proposer, tree):
    llm = ScriptedLLM(flavour="openai-reasoning").add(
        Answer(reply(), reasoning_tokens=5000), Answer(reply(), reasoning_tokens=5000), reply())
    with LLMServer(llm) as server:
        proposer = make_proposer(server)
        proposal = proposer.propose(tree, "n001")
    assert proposal.hyperparameters["learning_rate"] == 1e-4
    # 2000, empty; twice that, still empty: returned, and sent back as cut off, with room to reason from then on
    assert [r["max_completion_tokens"] for r in llm.requests] == [2000, 4000, 8000]
    assert "cut off" in llm.requests[2]["messages"][-1]["content"] and proposer.client.usage.length_retries == 1


def test_still_invalid_after_two_repairs_is_dropped_and_counted(make_proposer, tree):
    with serve("nope", "still nope", "{}", reply()) as server:
        proposer = make_proposer(server)
        with pytest.raises(ProposalDropped, match="dropped after 2 repairs"):
            proposer.propose(tree, "n001")
        assert proposer.dropped == 1 and len(server.llm.requests) == 3
        # The next proposal sees the drop in its feedback section.
        proposer.propose(tree, "n001")
        assert "Feedback on your last proposal" in server.llm.requests[3]["messages"][1]["content"]


def test_rate_limit_then_success(make_proposer, tree):
    with serve(Answer(status=429, content="slow down"), reply()) as server:
        proposal = make_proposer(server).propose(tree, "n001")
    assert not proposal.rationale.startswith("optuna fallback") and len(server.llm.requests) == 2


@pytest.mark.parametrize(("failure", "attempts"), [
    (Answer(delay=3.0, content=reply()), 2),  # one attempt plus one retry
    # Before a first reply a 500 may be the server refusing json_schema (llama.cpp): json_schema and json_object
    # once each, then no response format with its retry. Nothing is remembered: the next call tries json_schema.
    (Answer(status=500, content="boom"), 4),
])
def test_timeouts_and_server_errors_fall_back_to_optuna(make_proposer, tree, failure, attempts):
    llm = ScriptedLLM()
    llm.default = failure  # every request fails the same way: a timeout or a 500 storm
    with LLMServer(llm) as server:
        proposer = make_proposer(server)
        proposal = proposer.propose(tree, "n001")
    assert proposal.optuna_trial is not None and proposal.rationale.startswith("optuna fallback: LLM unavailable")
    assert any("proposing with optuna instead" in n for n in proposer.notices)
    assert len(llm.requests) == attempts and proposer.client.structured is None


def test_token_budget_stops_asking(make_proposer, tree):
    with serve(reply(), reply()) as server:
        proposer = make_proposer(server, max_tokens=100)
        proposer.propose(tree, "n001")  # spends 160 tokens (+ the probe)
        fallback = proposer.propose(tree, "n001")
    assert fallback.optuna_trial is not None and "token budget spent" in fallback.rationale
    assert len(server.llm.requests) == 1


def test_cached_replies_are_not_paid_twice(make_proposer, tree):
    with serve(reply()) as server:
        make_proposer(server).propose(tree, "n001")
    with serve() as server:  # an empty script: any request would fail
        again = make_proposer(server)
        proposal = again.propose(tree, "n001")
    assert proposal.hyperparameters["learning_rate"] == 1e-4
    assert server.llm.requests == [] and again.client.usage.cache_hits == 1


def test_prompted_json_when_the_server_has_no_schema_support(make_proposer, tree):
    with serve("```json\n" + reply() + "\n```", supports_schema=False) as server:
        proposal = make_proposer(server).propose(tree, "n001")
    refused, taken = server.llm.requests[:-1], server.llm.requests[-1]
    assert [r["response_format"]["type"] for r in refused] == ["json_schema", "json_object"]
    assert "response_format" not in taken and all(r["messages"] == taken["messages"] for r in refused)
    assert proposal.parent == "n001"


def test_hybrid_samples_inside_the_llm_ranges(make_proposer, tree):
    search = [{"name": "learning_rate", "low": 2e-5, "high": 4e-5}, {"name": "temperature", "low": 0.7, "high": 0.9}]
    with serve(reply(search=search)) as server:
        proposer = make_proposer(server, hybrid=True)
        proposal = proposer.propose(tree, "n001")
    assert 2e-5 <= proposal.hyperparameters["learning_rate"] <= 4e-5
    assert 0.7 <= proposal.hyperparameters["temperature"] <= 0.9
    assert proposal.optuna_trial is not None
    node = Node("n003", "n001", 2, proposal.hyperparameters, seed=3, proposer="hybrid", status=Status.SUCCEEDED,
                val_score=0.65, val_stderr=0.01, optuna_trial=proposal.optuna_trial)
    tree.add(node)
    proposer.observe(tree, node)
    assert proposer.study.trials[proposal.optuna_trial].value == pytest.approx(0.05)


def test_schema_is_strict_and_matches_the_space():
    schema = reply_schema(TEMPLATE.space)
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]["hyperparameters"]["required"]) == set(TEMPLATE.space.params)
    assert schema["properties"]["hyperparameters"]["properties"]["num_generations"] == {"enum": [4, 8, 16]}


def test_a_rejection_reason_reaches_the_next_prompt(make_proposer, tree):
    with serve(reply(parent="n001"), reply(parent="n001", temperature=0.9)) as server:
        proposer = make_proposer(server)
        first = proposer.propose(tree, "n001")
        proposer.withdraw(first, reason="too timid")
        proposer.propose(tree, "n001")
    last_prompt = server.llm.requests[-1]["messages"][-1]["content"]
    assert "a person rejected the proposal from n001" in last_prompt and "too timid" in last_prompt


def test_a_llama_cpp_style_server_gets_json_object_with_the_schema(make_proposer, tree):
    with serve(reply(), supports_schema="json_object") as server:
        proposal = make_proposer(server).propose(tree, None)
    assert proposal.hyperparameters["learning_rate"] == 1e-4
    request = server.llm.requests[-1]
    assert request["response_format"]["type"] == "json_object" and "properties" in request["response_format"]["schema"]


@pytest.mark.parametrize("content", [
    reply().replace('"reward still rising"', '"reward still\nrising"').replace("\\n", "\n"),  # raw newline in a string
    "Here is my proposal:\n" + reply() + "\nI hope it helps.",  # prose around the object, no fence
    "```\n" + reply() + "\n```",  # a fence without a language
])
def test_replies_as_local_servers_write_them_are_read(make_proposer, tree, content):
    with serve(content) as server:
        proposal = make_proposer(server).propose(tree, None)
    assert proposal.hyperparameters["learning_rate"] == 1e-4


def test_values_outside_the_bounds_go_back_for_repair(make_proposer, tree):
    with serve(reply(learning_rate=5.0), reply()) as server:  # servers do not enforce numeric bounds
        proposal = make_proposer(server).propose(tree, None)
    assert proposal.hyperparameters["learning_rate"] == 1e-4
    assert "learning_rate=5.0 is outside" in server.llm.requests[-1]["messages"][-1]["content"]


def test_every_request_carries_its_own_seed(make_proposer, tree):
    with serve("not json", reply(), reply()) as server:
        proposer = make_proposer(server, cache=False)
        proposer.propose(tree, None)
        proposer.propose(tree, None)
    seeds = [request["seed"] for request in server.llm.requests]
    assert len(seeds) == 3 and len(set(seeds)) == 3


def test_a_repeat_of_a_sibling_goes_back_to_the_llm_with_the_evidence(make_proposer, tree):
    from search.proposers import Guarded

    tree.add(Node("n003", "n001", 2, {**TEMPLATE.space.defaults(), "learning_rate": 1e-4}, seed=3, proposer="llm",
                  commit=tree.nodes["n001"].commit, status=Status.SUCCEEDED, val_score=0.61, val_stderr=0.015))
    with serve(reply(), reply(learning_rate=3e-5)) as server:
        proposal = Guarded(make_proposer(server), TEMPLATE.space).propose(tree, None)
        assert proposal.hyperparameters["learning_rate"] == 3e-5
        assert "nearly repeats n003" in json.dumps(server.llm.requests[-1]["messages"])


def test_a_reply_after_the_timeout_is_said_in_the_next_prompts_and_counted(make_proposer, tree):
    """The first request is held past the 1 s timeout: Optuna proposes n003 instead. The next prompt says
    the reply is still awaited; once it arrives, the one after says it came late, what it proposed, and
    that it was discarded; after that prompt was answered, it is not said again."""
    import re
    import threading

    from conftest import wait_until

    release = threading.Event()
    llm = ScriptedLLM().add(Answer(reply(parent="n001", temperature=0.8), hold=release), reply(), reply(), reply())
    with LLMServer(llm) as server:
        proposer = make_proposer(server, max_retries=0)
        try:
            first = proposer.propose(tree, "n001")
            assert first.optuna_trial is not None
            assert first.rationale == "optuna fallback: LLM unavailable (no reply within 1 s)"
            # What the controller does with it: n003, training while the next stage is proposed.
            tree.add(Node(tree.next_id(), "n001", 2, first.hyperparameters, seed=3, proposer="llm",
                          commit=tree.nodes["n001"].commit, status=Status.RUNNING, rationale=first.rationale))
            proposer.propose(tree, "n001")
        finally:
            release.set()
        wait_until(lambda: proposer.client.usage.late_replies == 1, "the late reply arrives", timeout=30)
        proposer.propose(tree, "n001")
        proposer.propose(tree, "n001")
    prompts = [request["messages"][1]["content"] for request in llm.requests]
    assert len(prompts) == 4 and "timed out" not in prompts[0]
    assert ("# Your requests that timed out\n\n- Your reply to request #1 did not come within the 1 s timeout; "
            "stage n003 was proposed by Optuna (TPE) instead. If it still comes, it is discarded.") in prompts[1]
    assert re.search(r"- Your reply to request #1 arrived after \d+\.\d s, past the 1 s timeout, and was discarded "
                     r"\(it proposed parent n001 with [^)]*temperature=0\.8[^)]*\); stage n003 was proposed by Optuna "
                     r"\(TPE\) instead\.", prompts[2])
    assert "timed out" not in prompts[3]
    for shown in prompts[1:]:  # the stage Optuna proposed is in flight, and says why
        assert "- n003 ← n001 (stage 2): running; " in shown
        assert "proposed because: optuna fallback: LLM unavailable (no reply within 1 s)" in shown
    usage = proposer.usage()
    assert (usage["llm_timeouts"], usage["llm_late_replies"], usage["llm_calls"]) == (1, 1, 4)
    told = [n for n in proposer.notices if "arrived after" in n]
    assert len(told) == 1 and told[0].startswith("LLM: the reply to request #1 arrived after")


def test_a_timed_out_attempt_answered_on_retry_is_said_without_a_fallback(make_proposer, tree):
    import threading

    from conftest import wait_until

    release = threading.Event()
    llm = ScriptedLLM().add(Answer(reply(temperature=0.8), hold=release), reply(), reply())
    with LLMServer(llm) as server:
        proposer = make_proposer(server, max_retries=1)
        try:
            proposal = proposer.propose(tree, "n001")  # the first attempt times out, its retry is answered
        finally:
            release.set()
        assert not proposal.rationale.startswith("optuna fallback")
        wait_until(lambda: proposer.client.usage.late_replies == 1, "the late reply arrives", timeout=30)
        proposer.propose(tree, "n001")
    assert "arrived after" in llm.requests[-1]["messages"][1]["content"]
    assert "it was sent again and that reply was used." in llm.requests[-1]["messages"][1]["content"]


def test_an_edit_keeps_train_py_s_final_newline():
    from search.edits import EditBlock, apply_edit

    source = "def main():\n    pass\n\n\nif __name__ == \"__main__\":\n    main()\n"
    edited = apply_edit(source, [EditBlock(search="    main()\n", replace="    main()  # run")])
    assert edited == "def main():\n    pass\n\n\nif __name__ == \"__main__\":\n    main()  # run\n"
    assert apply_edit("x = 1", [EditBlock(search="x = 1", replace="x = 2")]) == "x = 2"  # none added where none was


def test_a_session_s_prompt_states_the_training_set_size_and_the_installed_trl(tmp_path, workspace):
    from importlib import metadata

    from autorl.config import SessionConfig
    from autorl.loop.budget import Budget
    from autorl.session import strategy_proposer
    from search.context import STATIC_END, PromptView

    config = SessionConfig(name="s", topic="beat 60%", template="arith", strategy="hybrid", stages=8, max_depth=3,
                           runs_dir=tmp_path / "runs", tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
                           llm_model="scripted", llm_base_url="http://127.0.0.1:9/v1")
    proposer = strategy_proposer(config, TEMPLATE, workspace, Budget(max_stages=8), "sk-test", notify=print)
    user = proposer.context.messages(Tree(0.53, 0.016), PromptView(None, [None], "0 of 8 stages"))[1]["content"]
    static = user[: user.index(STATIC_END)]
    assert f"TRL {metadata.version('trl')} is installed" in static
    assert f"{TEMPLATE.constants['stage']['train_size']:,} training prompts" in static


def test_the_prompt_bound_is_the_session_s_choice(tmp_path, workspace):
    from autorl.config import SessionConfig
    from autorl.loop.budget import Budget
    from autorl.session import strategy_proposer
    from search.context import PromptView

    tree = Tree(0.53, 0.016)
    for i in range(1, 9):
        tree.add(Node(f"n{i:03d}", None if i < 3 else f"n{(i - 1) // 2:03d}", 1 if i < 3 else 2,
                      TEMPLATE.space.defaults(), seed=i, proposer="llm", commit=workspace.root_commit,
                      status=Status.SUCCEEDED, val_score=0.6 + i / 100, val_stderr=0.015, steps=20))
    curves = {}
    for tokens in (3000, 20000):
        config = SessionConfig(name="s", topic="beat 60%", template="arith", strategy="llm", stages=8,
                               max_depth=3, runs_dir=tmp_path / "runs", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                               llm_model="scripted", llm_base_url="http://127.0.0.1:9/v1", llm_prompt_tokens=tokens)
        proposer = strategy_proposer(config, TEMPLATE, workspace, Budget(max_stages=8), "sk-test", notify=print)
        proposer.context.curves = lambda node_id: "- reward: start 0.41, end 0.63\n" * 20
        user = proposer.context.messages(tree, PromptView(None, [None, "n001"], "8 of 16"))[1]["content"]
        assert len(user) <= tokens * 4
        curves[tokens] = user.count("- curves of its stage")
    assert curves[20000] > curves[3000]


def test_a_node_past_the_depth_limit_is_a_parent_only_while_its_stage_is_not_worse(make_proposer, tree, workspace):
    for node_id, parent, depth in (("n003", "n001", 2), ("n004", "n003", 3)):
        tree.add(Node(node_id, parent, depth, TEMPLATE.space.defaults(), seed=depth, proposer="llm",
                      commit=workspace.root_commit, status=Status.SUCCEEDED, val_score=0.6 + depth / 100,
                      val_stderr=0.015, comparison=Comparison(-0.04, 0.01, 1000, "worse")))
    with serve(reply(parent="n004"), reply(parent="n003")) as server:
        assert make_proposer(server).propose(tree, "n001").parent == "n003"
    assert "'n004' cannot be extended" in server.llm.requests[1]["messages"][-1]["content"]
    for verdict in ("better", "tie"):  # the model weighs a tie at the limit itself; the UCT policy does not go on
        tree.nodes["n004"].comparison = Comparison(0.01, 0.009, 1000, verdict)
        with serve(reply(parent="n004")) as server:
            assert make_proposer(server).propose(tree, "n001").parent == "n004"
    assert "n004" not in BestFirstPolicy(3).candidates(tree)  # a tie, past the limit
