"""A whole hybrid session through the CLI against the scripted LLM server."""

import json

import git
import pytest
from conftest import make_template, run_cli
from llm_server import Answer, LLMServer, ScriptedLLM
from mlflow.tracking import MlflowClient

from autorl.stages import template as templates

pytestmark = pytest.mark.slow  # whole CLI sessions in subprocesses

DEFAULTS = templates.load("arith").space.defaults()


def reply(parent, edit=(), search=(), **values):
    return json.dumps({"parent": parent, "hyperparameters": {**DEFAULTS, **values}, "search": list(search),
                       "edit": list(edit), "rationale": "test the batch size", "expected_effect": "faster"})


def test_hybrid_session_with_an_edit_a_dropped_proposal_and_a_secret(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="env_dump_train.py", evaluate_py="fast_evaluate.py")
    key_file = tmp_path / "key"
    key_file.write_text("sk-very-secret-key\n")
    edit = [{"file": "train.py", "search": "BATCH_SIZE = 64", "replace": "BATCH_SIZE = 32"}]
    llm = ScriptedLLM().add(
        reply("base", edit=edit),
        "not json", "still not json", "{}",  # dropped after two repairs
        reply("n001", search=[{"name": "learning_rate", "low": 1e-5, "high": 3e-5}]),
    )
    with LLMServer(llm) as server:
        done = run_cli("research", "halve the batch", "--template", str(template), "--stages", "2", "--name", "llm",
                       "--llm", "scripted", "--llm-base-url", server.url, "--llm-key-file", str(key_file),
                       "--llm-timeout", "5", env={"OPENAI_API_KEY": "sk-env-secret"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "LLM proposal dropped after 2 repairs" in done.stdout
    assert all(r["model"] == "scripted" for r in llm.requests)

    data = json.loads(run_cli("show", "llm", "--json").stdout)
    first, second = data["nodes"]
    assert data["strategy"] == "hybrid" and data["status"] == "finished"
    assert first["proposer"] == second["proposer"] == "hybrid"
    assert first["parent"] is None and second["parent"] == "n001"
    assert 1e-5 <= second["hyperparameters"]["learning_rate"] <= 3e-5
    # The edit is a commit; the child runs its parent's edited train.py.
    repo = git.Repo(data["workspace"])
    assert first["commit"] == second["commit"] != repo.git.rev_list("--max-parents=0", "HEAD")
    assert "BATCH_SIZE = 32" in repo.git.show(f"{first['commit']}:train.py")
    metrics = [json.loads(line) for line in
               (runs_dir / "sessions" / "llm" / "nodes" / "n002" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["batch_size"] == 32

    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    artifacts = {a.path for a in client.list_artifacts(first["mlflow_run_id"])}
    assert {"llm_transcript.json", "train_py.diff"} <= artifacts
    diff = client.download_artifacts(first["mlflow_run_id"], "train_py.diff", str(tmp_path))
    assert "+BATCH_SIZE = 32" in open(diff).read()
    session = client.get_run(data["mlflow_run_id"])
    assert session.data.metrics["llm_dropped_proposals"] == 1
    assert session.data.metrics["llm_total_tokens"] > 0
    assert "sk-" not in json.dumps(session.data.params)
    import mlflow  # every LLM call is a trace linked to the session run

    mlflow.set_tracking_uri(f"sqlite:///{runs_dir / 'mlflow.db'}")
    traces = mlflow.search_traces(locations=[session.info.experiment_id], run_id=session.info.run_id,
                                  return_type="list")
    assert len(traces) == len(llm.requests) == 5

    # No key, from the file or the environment, reached a trial.
    for node in ("n001", "n002"):
        seen = (runs_dir / "sessions" / "llm" / "nodes" / node / "seen_env.json").read_text()
        assert "sk-very-secret-key" not in seen and "sk-env-secret" not in seen and "OPENAI" not in seen


def llm_reply(parent, **values):
    """A reply as the ``llm`` strategy's schema has it (no ``search``: that is hybrid's)."""
    return json.dumps({"parent": parent, "hyperparameters": {**DEFAULTS, **values}, "edit": [],
                       "rationale": "test the learning rate", "expected_effect": "higher reward"})


def test_llm_session_against_an_openai_reasoning_model(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="env_dump_train.py", evaluate_py="fast_evaluate.py")
    # As strict as OpenAI with o4-mini: max_tokens refused, the schema checked for strict mode and the
    # replies checked against it; reasoning tokens count against the completion cap.
    llm = ScriptedLLM(flavour="openai-reasoning", check_content=True).add(
        Answer(llm_reply("base", learning_rate=2e-5), reasoning_tokens=3000),
        Answer(llm_reply("n001", learning_rate=4e-5), reasoning_tokens=3000),
    )
    with LLMServer(llm) as server:
        done = run_cli("research", "tune the learning rate", "--template", str(template), "--stages", "2",
                       "--name", "reasoning", "--strategy", "llm", "--llm", "o4-mini", "--llm-base-url", server.url,
                       "--llm-reasoning-effort", "low", "--llm-timeout", "5", env={"OPENAI_API_KEY": "sk-test"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "proposing with optuna instead" not in done.stdout + done.stderr
    assert llm.refusals == [] and llm.violations == [] and len(llm.requests) == 2
    for request in llm.requests:
        assert request["max_completion_tokens"] == 8000 and "max_tokens" not in request
        assert request["reasoning_effort"] == "low" and request["response_format"]["type"] == "json_schema"
        assert "search" not in request["response_format"]["json_schema"]["schema"]["properties"]

    data = json.loads(run_cli("show", "reasoning", "--json").stdout)
    assert data["strategy"] == "llm" and data["status"] == "finished"
    first, second = data["nodes"]
    assert first["proposer"] == second["proposer"] == "llm"
    assert first["parent"] is None and second["parent"] == "n001"
    assert (first["hyperparameters"]["learning_rate"], second["hyperparameters"]["learning_rate"]) == (2e-5, 4e-5)
    session = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}").get_run(data["mlflow_run_id"])
    assert session.data.metrics["llm_reasoning_tokens"] == 6000 and session.data.metrics["llm_length_retries"] == 0
