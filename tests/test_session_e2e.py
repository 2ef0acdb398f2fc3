"""A whole research session through the real CLI: real GRPO, MLflow, Optuna and git."""

import json

import git
import pytest
from conftest import make_template, run_cli
from mlflow.tracking import MlflowClient

from sandbox import bwrap_works


@pytest.mark.slow
@pytest.mark.fresh_store
def test_three_stage_session_end_to_end(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", space={"max_steps": "[8]"})
    done = run_cli("research", "improve addition", "--template", str(template), "--stages", "3",
                   "--name", "e2e", "--seed", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "session finished" in done.stdout

    shown = run_cli("show", "e2e", "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["name"] == "e2e" and data["status"] == "finished"
    assert 0.45 < data["base_score"] < 0.62
    nodes = data["nodes"]
    assert [n["id"] for n in nodes] == ["n001", "n002", "n003"]
    assert nodes[0]["parent"] is None
    assert all(n["status"] == "succeeded" and n["val_score"] is not None for n in nodes)
    assert {n["parent"] for n in nodes[1:]} <= {None, "n001", "n002"}
    best = data["best"]
    assert best["test_score"] is not None and best["val_score"] == max(n["val_score"] for n in nodes)

    # MLflow holds the session as a parent run with one child run per node.
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    session = client.get_run(data["mlflow_run_id"])
    assert session.info.status == "FINISHED"
    assert session.data.tags["autorl.sandbox"] == ("bwrap" if bwrap_works()[0] else "none")  # GRPO trains inside it
    assert session.data.metrics["base_score"] == data["base_score"]
    assert session.data.metrics["best_test_score"] == best["test_score"]
    by_id = {n["id"]: n for n in nodes}
    for node in nodes:
        run = client.get_run(node["mlflow_run_id"])
        assert run.data.tags["mlflow.parentRunId"] == session.info.run_id
        assert run.data.tags["autorl.git_commit"] == node["commit"]
        assert run.data.params["learning_rate"] == str(node["hyperparameters"]["learning_rate"])
        assert 0 < node["weight_drift"] < 1 and run.data.metrics["weight_drift"] == node["weight_drift"]
        history = client.get_metric_history(run.info.run_id, "reward")
        assert len(history) == 8
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"spec.json", "metrics.jsonl", "stdout.log", "eval_validation.json", "train_py.diff",
                "diagnosis.json", "curves.png"} <= artifacts
        # paired on all 1,000 validation items, so the delta is exactly the difference of the two scores
        comparison = node["comparison"]
        parent_score = by_id[node["parent"]]["val_score"] if node["parent"] else data["base_score"]
        assert comparison["n"] == 1000 and abs(comparison["delta"] - (node["val_score"] - parent_score)) < 1e-9
        expected = ("better" if comparison["delta"] > 2 * comparison["stderr"] else
                    "worse" if comparison["delta"] < -2 * comparison["stderr"] else "tie")
        assert comparison["verdict"] == expected
    # A child's steps continue its parent's on the global step axis.
    for node in nodes:
        steps = sorted(m.step for m in client.get_metric_history(node["mlflow_run_id"], "reward"))
        assert steps == list(range(8 * (node["depth"] - 1) + 1, 8 * node["depth"] + 1))

    # The git workspace recorded the commit each node ran.
    repo = git.Repo(data["workspace"])
    assert {n["commit"] for n in nodes} == {repo.head.commit.hexsha}

    listed = json.loads(run_cli("ls", "--json").stdout)
    assert [s["name"] for s in listed] == ["e2e"]

    # Stages forked from the warm worker; each node says where its time went.
    for node in nodes:
        timing = node["timing"]
        assert node["worker"] == "warm"
        assert {"start_s", "train_s", "save_s", "stage_wall_s", "steps_s", "eval_s", "eval_generation_s",
                "started_at", "ended_at"} <= set(timing)
        assert 0 < timing["start_s"] < timing["stage_wall_s"] and timing["steps_s"] <= timing["stage_wall_s"]
        assert timing["eval_generation_s"] <= timing["eval_s"] and timing["started_at"] < timing["ended_at"]
        assert client.get_run(node["mlflow_run_id"]).data.metrics["timing_start_s"] == timing["start_s"]
    assert 0 < data["overhead_share"] < 1 and data["productive_seconds"] > 0


@pytest.mark.slow
def test_warm_and_cold_workers_train_the_same_scores(tmp_path, runs_dir):
    """Forking from a warm worker changes when a stage starts, not what it computes."""
    template = make_template(tmp_path / "tpl", space={"max_steps": "[4]"})
    scores = {}
    for workers in ("cold", "warm"):
        done = run_cli("research", "same", "--template", str(template), "--stages", "2", "--name", workers,
                       "--seed", "5", "--workers", workers, "--memory", "off")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        data = json.loads(run_cli("show", workers, "--json").stdout)
        assert {n["worker"] for n in data["nodes"]} == {workers}
        scores[workers] = [(n["hyperparameters"], n["val_score"], n["train_reward"]) for n in data["nodes"]]
    assert scores["cold"] == scores["warm"]
