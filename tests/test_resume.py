"""Resume from MLflow, proven by fault injection on the real `autorl` command.

The controller is SIGKILLed at each point a stage passes (AUTORL_FAULT), then
`autorl resume` must finish the session with the same tree an uninterrupted session
has: no lost or duplicated node, every MLflow run terminal, Optuna trials and nodes one
to one, the budget charged once per node, and a second resume a no-op. Stages copy the
checkpoint and a stand-in evaluator scores in milliseconds, so each case takes seconds.
"""

import json
import signal
import sqlite3
import subprocess
import threading
import time

import optuna
import pytest
from conftest import (
    AUTORL,
    REPO,
    STANDIN_ARGS,
    ignore_sigint,
    make_template,
    read_back,
    releasing,
    run_cli,
    tree_of,
    wait_until,
)
from mlflow.tracking import MlflowClient

from autorl.config import make_config, prepare_runs_dir
from autorl.session import create_session
from autorl.stages import template as templates
from autorl.storage.report import list_sessions
from autorl.storage.tracking import Tracker
from search import study as hpo

STAGES = 4  # conftest.STANDIN_ARGS
ARGS = STANDIN_ARGS


def session_processes(runs_dir) -> list[str]:
    """Processes of the session still alive: its warm worker (and every fork of it, which
    shares its command line, naming the session's workspace) or a cold trial."""
    found = subprocess.run(["pgrep", "-af", str(runs_dir / "sessions")], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


def assert_nothing_left(runs_dir, seconds=15):
    deadline = time.monotonic() + seconds
    while left := session_processes(runs_dir):
        assert time.monotonic() < deadline, f"processes outlived the controller: {left}"
        time.sleep(0.2)


def check_invariants(runs_dir, data):
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    session = client.get_run(data["mlflow_run_id"])
    assert session.info.status == "FINISHED" and data["status"] == "finished"
    runs = client.search_runs([session.info.experiment_id], max_results=1000)
    assert all(r.info.status in ("FINISHED", "FAILED", "KILLED") for r in runs)
    assert session.data.metrics["stages_spent"] == len(data["nodes"]) == STAGES
    assert (data["train_steps_spent"] == session.data.metrics["train_steps_spent"]
            == sum(n["steps"] for n in data["nodes"]))
    study = hpo.open_study(runs_dir / "sessions" / "s", "s", 3)  # the session keeps its own journal
    complete = sorted(t.number for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE)
    tags = {n["id"]: client.get_run(n["mlflow_run_id"]).data.tags for n in data["nodes"]}
    owned = [int(t["autorl.optuna_trial"]) for t in tags.values() if "autorl.optuna_trial" in t]
    told = {t.number: t.user_attrs["node"] for t in study.trials if "node" in t.user_attrs}  # stages Optuna did not ask
    assert sorted(told.values()) == sorted(n for n, t in tags.items() if "autorl.optuna_trial" not in t)
    assert complete == sorted(owned + list(told))  # every finished trial is a node and every node a finished trial
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]



def test_a_stage_trained_again_starts_from_what_it_writes_itself(tmp_path):
    """A stage cut short by a stop may have written metrics and part of its checkpoint;
    trained again (on resume, or cold after a lost warm worker) it must not trip over them
    (copy_train.py's copytree refuses an existing checkpoint) nor count the old steps."""
    from autorl.stages.spec import TrialSpec
    from autorl.stages.stage import StageRunner
    from sandbox import choose_sandbox

    workspace, start, node_dir = tmp_path / "workspace", tmp_path / "start", tmp_path / "n001"
    workspace.mkdir()
    (workspace / "train.py").write_text((REPO / "tests" / "experiments" / "copy_train.py").read_text())
    start.mkdir()
    (start / "config.json").write_text("{}")
    (node_dir / "checkpoint").mkdir(parents=True)  # what the cut attempt left
    (node_dir / "checkpoint" / "half-written.bin").write_bytes(b"\0" * 16)
    (node_dir / "metrics.jsonl").write_text('{"step": 1, "reward": 9.0}\n{"step": 2, "reward": 9.0}\n')
    spec = TrialSpec(node_id="n001", init_checkpoint=str(start), output_dir=str(node_dir),
                     metrics_path=str(node_dir / "metrics.jsonl"), hyperparameters={}, max_steps=2, seed=1,
                     wall_seconds=60)
    outcome = StageRunner(workspace, choose_sandbox("none")).run(spec, node_dir)
    assert outcome.ok, outcome.reason
    assert [r["reward"] for r in outcome.records] == [0.5, 0.5]
    assert sorted(p.name for p in (node_dir / "checkpoint").iterdir()) == ["config.json"]

@pytest.mark.slow
@pytest.mark.parametrize("point", ["proposal_accepted:2", "launched:2", "mid_training:2", "trained:2",
                                   "mid_evaluation:3", "evaluated:2"])
def test_killed_controller_resumes_to_the_same_tree(point, fast_template, reference, runs_dir):
    killed = run_cli("research", "t", "--template", str(fast_template), *ARGS, env={"AUTORL_FAULT": point})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert_nothing_left(runs_dir)  # the warm worker and a running trial die with the controller
    listed = list_sessions(Tracker.for_runs_dir(runs_dir))
    assert listed[0]["resumable"] and listed[0]["resume_note"] == "controller died"

    resumed = run_cli("resume", "s")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    data, tree = tree_of(runs_dir)
    assert tree == reference
    check_invariants(runs_dir, data)

    assert_nothing_left(runs_dir, seconds=5)
    again = run_cli("resume", "s")
    assert again.returncode == 0 and "already finished" in again.stdout
    assert tree_of(runs_dir)[1] == reference


def start_slow_session(template, name="slow", stages=3):
    return subprocess.Popen([*AUTORL, "research", "t", "--template", str(template), "--stages", str(stages),
                             "--name", name],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ignore_sigint)


def wait_for(path, timeout=120):
    wait_until(path.exists, f"{path} appears", timeout)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_ctrl_c_stop_cleanly_and_resume_finishes(sig, tmp_path, runs_dir):
    """Started as a background job would be (SIGINT ignored), stopped while n002 is held mid-stage."""
    template = make_template(tmp_path / "tpl", train_py="held_copy_train.py", evaluate_py="fast_evaluate.py")
    nodes = runs_dir / "sessions" / "slow" / "nodes"
    with releasing(nodes, hold=frozenset({"n002"})):
        process = start_slow_session(template)
        wait_until((nodes / "n002" / "metrics.jsonl").exists, "n002 starts training", process=process)
        process.send_signal(sig)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 130, out + err
    assert "autorl resume slow" in err
    data = read_back(runs_dir, "slow")
    assert data["status"] == "stopped" and [n["status"] for n in data["nodes"]] == ["succeeded", "interrupted"]
    assert data["nodes"][1]["mlflow_status"] == "KILLED"
    wait_until(lambda: not subprocess.run(["pgrep", "-f", str(nodes / "n002")], capture_output=True).stdout,
               "the stopped trial is gone", timeout=10)  # this test's trial: other tests may run beside it

    with releasing(nodes):
        resumed = run_cli("resume", "slow")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    data = read_back(runs_dir, "slow")
    assert data["status"] == "finished" and [n["id"] for n in data["nodes"]] == ["n001", "n002", "n003"]
    assert all(n["status"] == "succeeded" for n in data["nodes"])


@pytest.mark.slow
def test_a_second_controller_on_the_same_session_refuses(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="slow_copy_train.py", evaluate_py="fast_evaluate.py")
    process = start_slow_session(template, stages=50)
    try:
        wait_for(runs_dir / "sessions" / "slow" / "nodes" / "n001" / "metrics.jsonl")
        second = run_cli("resume", "slow")
        assert second.returncode == 1 and "being run by another controller" in second.stderr
        listed = json.loads(run_cli("ls", "--json").stdout)
        assert not listed[0]["resumable"] and "live controller" in listed[0]["resume_note"]
    finally:
        process.terminate()
        process.communicate(timeout=60)


def test_a_locked_store_is_retried(runs_dir):
    tracker = Tracker.for_runs_dir(prepare_runs_dir(runs_dir))
    run_id = tracker.start_session("locked", params={}, tags={})
    holder = sqlite3.connect(runs_dir / "mlflow.db", timeout=0, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    threading.Timer(4.0, holder.rollback).start()
    started = time.monotonic()
    tracker.set_tags(run_id, {"autorl.note": "written after the lock"})
    assert time.monotonic() - started >= 3.0
    assert MlflowClient(tracker.uri).get_run(run_id).data.tags["autorl.note"] == "written after the lock"


def test_a_full_disk_stops_the_session_cleanly(tmp_path, runs_dir, tracker, monkeypatch):
    from autorl.config import make_config
    from autorl.loop import controller as controller_module
    from autorl.session import create_session
    from autorl.stages import template as templates

    template = templates.load(str(make_template(tmp_path / "tpl", train_py="copy_train.py",
                                                evaluate_py="fast_evaluate.py")))
    config = make_config(name="full", topic="t", template=str(template.path), stages=3, runs_dir=runs_dir,
                         tracking_uri=tracker.uri)
    controller = create_session(config, template, tracker)
    monkeypatch.setattr(controller_module, "MIN_FREE_BYTES", 2**62)
    controller.run()
    assert controller.status == "stopped" and "disk nearly full" in controller.reason
    assert controller.tree.nodes == {}  # nothing launched
    run = MlflowClient(tracker.uri).get_run(controller.session_run_id)
    assert run.info.status == "KILLED" and "disk nearly full" in run.data.tags["autorl.reason"]


@pytest.mark.slow
def test_the_approval_mode_is_stored_and_resume_honours_it(tmp_path, runs_dir, tracker):
    from autorl.storage.records import stored_config

    template = templates.load(str(make_template(tmp_path / "tpl", train_py="copy_train.py",
                                                evaluate_py="fast_evaluate.py")))
    config = make_config(name="reviewed", topic="t", template=str(template.path), stages=1, approve="edits",
                         runs_dir=runs_dir, tracking_uri=tracker.uri)
    create_session(config, template, tracker).finish("stopped", "stopped by the test")
    refused = run_cli("resume", "reviewed")  # no terminal here: it must not go on unreviewed
    assert refused.returncode == 1 and "started with --approve edits" in refused.stderr
    assert "--approve none" in refused.stderr
    done = run_cli("resume", "reviewed", "--approve", "none")
    assert done.returncode == 0, done.stdout + done.stderr
    assert stored_config(tracker.find_session("reviewed")).approve == "none"
