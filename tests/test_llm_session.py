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
                       "--strategy", "hybrid", "--llm", "scripted", "--llm-base-url", server.url,
                       "--llm-key-file", str(key_file), "--llm-timeout", "5", env={"OPENAI_API_KEY": "sk-env-secret"})
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


def closed_port_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def no_runs_in(runs_dir) -> bool:
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()]) == []


@pytest.mark.parametrize("case", ["key refused", "unknown model", "nothing answers"])
def test_an_llm_that_cannot_serve_the_session_stops_it_before_anything_is_created(case, tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="copy_train.py", evaluate_py="fast_evaluate.py")
    key_file = tmp_path / "key"
    key_file.write_text("sk-wrong-secret-9876\n" if case == "key refused" else "sk-right-key-1234\n")
    llm = ScriptedLLM(api_key="sk-right-key-1234", models=("gpt-4o-mini",)).add(reply("base"))
    with LLMServer(llm) as server:
        url = closed_port_url() if case == "nothing answers" else server.url
        model = "gpt-9" if case == "unknown model" else "gpt-4o-mini"
        done = run_cli("research", "t", "--template", str(template), "--stages", "1", "--name", "stopped",
                       "--strategy", "llm", "--llm", model, "--llm-base-url", url, "--llm-key-file", str(key_file),
                       "--llm-timeout", "5")
    expected = {
        "key refused": f"error: the LLM endpoint {url} refused the key (HTTP 401); check --llm-key-file or "
                       "$OPENAI_API_KEY",
        "unknown model": f"error: model 'gpt-9' is not served at {url} (HTTP 404); pass --llm MODEL with one it serves",
        "nothing answers": f"error: --llm-base-url {url}: nothing answers (connection refused); start the server or "
                           "pass another URL",
    }[case]
    assert done.returncode == 1 and done.stderr.strip() == expected, done.stdout[-2000:] + done.stderr[-2000:]
    assert "9876" not in done.stdout + done.stderr and "Traceback" not in done.stdout + done.stderr
    assert not (runs_dir / "sessions").exists() and no_runs_in(runs_dir)  # no session folder, no MLflow run
    assert llm.requests == [] and len(llm.probes) == (0 if case == "nothing answers" else 1)


def test_llm_fallback_optuna_warns_and_proposes_with_optuna(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="copy_train.py", evaluate_py="fast_evaluate.py")
    url = closed_port_url()
    done = run_cli("research", "t", "--template", str(template), "--stages", "1", "--name", "fallback",
                   "--strategy", "llm", "--llm", "gpt-4o-mini", "--llm-base-url", url, "--llm-timeout", "2",
                   "--llm-fallback", "optuna", env={"OPENAI_API_KEY": "sk-test"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (f"--llm-base-url {url}: nothing answers (connection refused); start the server or pass another URL: "
            "proposing with optuna while it fails (--llm-fallback optuna)") in " ".join(done.stdout.split())
    data = json.loads(run_cli("show", "fallback", "--json").stdout)
    assert data["status"] == "finished" and data["nodes"][0]["rationale"].startswith("optuna fallback: LLM unavailable")


def test_resume_checks_the_endpoint_the_same_way(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="copy_train.py", evaluate_py="fast_evaluate.py")
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_text("sk-right-key-1234\n")
    wrong.write_text("sk-wrong-secret-9876\n")
    llm = ScriptedLLM(api_key="sk-right-key-1234")
    llm.default = Answer(llm_reply("base", learning_rate=2e-5))
    with LLMServer(llm) as server:
        killed = run_cli("research", "t", "--template", str(template), "--stages", "1", "--name", "again",
                         "--strategy", "llm", "--llm", "scripted", "--llm-base-url", server.url, "--llm-key-file",
                         str(right), "--llm-timeout", "5", env={"AUTORL_FAULT": "proposal_accepted"})
        assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
        run_id = json.loads(run_cli("show", "again", "--json").stdout)["mlflow_run_id"]
        client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
        before = client.get_run(run_id).data.tags

        refused = run_cli("resume", "again", "--llm-key-file", str(wrong))
        assert refused.returncode == 1, refused.stdout[-2000:] + refused.stderr[-2000:]
        assert refused.stderr.strip() == (f"error: the LLM endpoint {server.url} refused the key (HTTP 401); check "
                                          "--llm-key-file or $OPENAI_API_KEY")
        assert client.get_run(run_id).data.tags == before  # nothing changed: not even the count of resumes

        resumed = run_cli("resume", "again", "--llm-key-file", str(right))
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert json.loads(run_cli("show", "again", "--json").stdout)["status"] == "finished"
