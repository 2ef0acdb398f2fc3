"""A session lives in MLflow: its folder is a cache that resume, show and report rebuild;
checkpoints are run artifacts that retention prunes to the frontier; the winner is an
MLflow model. (The same against a tracking server: tests/test_server.py.)"""

import json
import shutil
import signal

import mlflow
import pytest
from conftest import STANDIN_ARGS, run_cli, tree_of
from mlflow.tracking import MlflowClient

from autorl.storage.lock import SessionLock
from autorl.storage.records import stored_config
from autorl.storage.tracking import Tracker

pytestmark = pytest.mark.slow


def stored_checkpoints(runs_dir) -> dict[str, tuple[str, bool]]:
    """Each node's record of its checkpoint, and whether the store holds one."""
    data, _ = tree_of(runs_dir)
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    return {n["id"]: (n["checkpoint"], any(a.path == "checkpoint/config.json"
                                           for a in client.list_artifacts(n["mlflow_run_id"], "checkpoint")))
            for n in data["nodes"]}


def test_resume_rebuilds_a_deleted_session_folder(fast_template, reference, runs_dir):
    killed = run_cli("research", "t", "--template", str(fast_template), *STANDIN_ARGS,
                     env={"AUTORL_FAULT": "evaluated:2"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    shutil.rmtree(runs_dir / "sessions" / "s")
    shown = run_cli("show", "s", "--json")
    assert shown.returncode == 0 and len(json.loads(shown.stdout)["nodes"]) == 2, shown.stderr
    assert not (runs_dir / "sessions" / "s").exists()  # reading rebuilds nothing
    listed = json.loads(run_cli("ls", "--json").stdout)
    assert listed[0]["resumable"], listed
    resumed = run_cli("resume", "s")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "rebuilt the session folder from MLflow: workspace, frozen hashes, Optuna study" in resumed.stdout
    assert tree_of(runs_dir)[1] == reference
    shutil.rmtree(runs_dir / "sessions" / "s")
    report = run_cli("report", "s")
    assert report.returncode == 0 and (runs_dir / "sessions" / "s" / "report" / "report.html").is_file(), report.stderr


def test_retention_keeps_the_frontier_and_the_records(fast_template, runs_dir):
    done = run_cli("research", "t", "--template", str(fast_template), "--stages", "8", "--max-depth", "2",
                   "--seed", "1", "--name", "s")
    assert done.returncode == 0, done.stdout + done.stderr
    data, _ = tree_of(runs_dir)
    checkpoints = stored_checkpoints(runs_dir)
    assert all(state == ("stored", True) or state == ("deleted", False) for state in checkpoints.values())
    assert checkpoints[data["best"]["id"]] == ("stored", True)
    deleted = [node for node, (state, _) in checkpoints.items() if state == "deleted"]
    assert deleted, checkpoints  # at depth 2 of 2, leaves can never be a parent
    assert f"checkpoints deleted (no later stage can start from them): {deleted[0]}" in done.stdout
    nodes = {n["id"]: n for n in data["nodes"]}
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    for node_id in deleted:  # the records, curves and evaluations stay
        run = client.get_run(nodes[node_id]["mlflow_run_id"])
        assert run.data.metrics["val_score"] == nodes[node_id]["val_score"]
        assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"metrics.jsonl", "eval_validation.json"}
    assert not any((runs_dir / "sessions" / "s" / "nodes").glob("*/checkpoint"))  # no second copy here


def test_all_keeps_every_checkpoint(fast_template, runs_dir):
    done = run_cli("research", "t", "--template", str(fast_template), "--stages", "4", "--max-depth", "2",
                   "--keep-checkpoints", "all", "--name", "s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(stored_checkpoints(runs_dir).values()) == {("stored", True)}


def test_resume_stores_a_changed_config_only_once_the_session_is_its_own(fast_template, runs_dir):
    held = run_cli("research", "t", "--template", str(fast_template), *STANDIN_ARGS,
                   env={"AUTORL_FAULT": "evaluated:1"})
    assert held.returncode == -signal.SIGKILL
    lock = SessionLock(runs_dir / "sessions" / "s").acquire()  # another controller runs it
    try:
        refused = run_cli("resume", "s", "--parallel", "3")
    finally:
        lock.release()
    assert refused.returncode == 1 and "being run by another controller" in refused.stderr
    assert stored_config(Tracker.for_runs_dir(runs_dir).find_session("s")).parallel == 1


def test_the_winner_is_a_registered_model_that_generates(runs_dir):
    """Real GRPO on the default template: one stage, its checkpoint registered and loaded back."""
    done = run_cli("research", "t", "--template", "digitsort", "--train-steps", "10", "--register", "sorter",
                   "--name", "s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the winner n001 as an MLflow model: models:/sorter/1" in done.stdout
    mlflow.set_tracking_uri(f"sqlite:///{runs_dir / 'mlflow.db'}")
    generate = mlflow.transformers.load_model("models:/sorter/1")
    reply = generate([{"role": "user", "content": "Sort these digits: 3 1 2"}], max_new_tokens=12, do_sample=False)
    assert reply[0]["generated_text"][-1]["role"] == "assistant" and reply[0]["generated_text"][-1]["content"]
