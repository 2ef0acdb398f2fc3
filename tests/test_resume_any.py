"""Resume from any moment under the step budget.

A `--train-steps` session whose stages train fewer steps than they plan (as stages cut
short by a time limit do) is SIGKILLed at random moments and at the points inside a
node's creation, then resumed the way a user would: `autorl resume`, or, when the kill
came before the session existed, `autorl research` again with the same name. Each must
end exactly as the session left alone: the same tree, every node terminal, no MLflow run
left RUNNING, the steps charged equal to the steps the nodes trained; a second resume
changes nothing.
"""

import os
import random
import signal
import subprocess
import time

import pytest
from conftest import AUTORL, REPO, make_template, run_cli
from mlflow.tracking import MlflowClient
from test_resume import assert_nothing_left, tree_of

TRAIN_STEPS = 100
ARGS = ["--train-steps", str(TRAIN_STEPS), "--seed", "3", "--name", "s"]
RANDOM_KILLS = int(os.environ.get("AUTORL_RANDOM_KILLS", "2"))  # more: benchmarks/resume_any.py, or set it
KILL_SEED = int(os.environ.get("AUTORL_KILL_SEED", "37"))


@pytest.fixture(scope="module")
def short_template(tmp_path_factory):
    return make_template(tmp_path_factory.mktemp("tpl") / "tpl", train_py="short_steps_train.py",
                         evaluate_py="fast_evaluate.py")


def research(template, runs_dir=None, env=None):
    extra = ["--runs-dir", str(runs_dir)] if runs_dir else []
    return run_cli("research", "t", "--template", str(template), *ARGS, *extra, env=env)


@pytest.fixture(scope="module")
def reference(short_template, tmp_path_factory):
    runs = tmp_path_factory.mktemp("reference")
    started = time.monotonic()
    done = research(short_template, runs)
    assert done.returncode == 0, done.stdout + done.stderr
    data, tree = tree_of(runs)
    return {"tree": tree, "data": data, "seconds": time.monotonic() - started, "out": done.stdout}


@pytest.mark.slow
def test_the_session_stops_on_settled_steps_and_says_how_many(reference):
    """Its stages train 40-80% of what they plan: the stop is decided after the last of them
    settled, and the reason names the steps trained, not what a running stage reserved."""
    data = reference["data"]
    trained = sum(n["steps"] for n in data["nodes"])
    assert TRAIN_STEPS - 10 < trained <= TRAIN_STEPS  # stopped only when not even a 10-step stage fits
    assert any(n["steps"] < n["hyperparameters"]["max_steps"] for n in data["nodes"])  # reservations were larger
    assert data["train_steps_spent"] == trained
    assert f"training-step budget spent ({trained} of {TRAIN_STEPS} steps trained;" in reference["out"]
    assert "reserved" not in reference["out"]


def recover(template) -> subprocess.CompletedProcess:
    """What a user does after a kill: resume, or start again when the session never existed."""
    resumed = run_cli("resume", "s")
    if resumed.returncode == 1 and ("no session named" in resumed.stderr or "being created" in resumed.stderr):
        return research(template)
    return resumed


def check_recovered(runs_dir, reference, recovered):
    out = recovered.stdout + recovered.stderr
    assert recovered.returncode == 0 and "Traceback" not in out, out
    data, tree = tree_of(runs_dir)
    assert data["status"] == "finished"
    assert all(n["status"] in ("succeeded", "failed") for n in data["nodes"])
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("autorl").experiment_id], max_results=1000)
    assert not [r.info.run_id for r in runs if r.info.status == "RUNNING"]
    assert data["train_steps_spent"] == sum(n["steps"] for n in data["nodes"])
    assert tree == reference["tree"], out[:3000]
    assert_nothing_left(runs_dir, seconds=5)
    again = run_cli("resume", "s")
    assert again.returncode == 0 and "already finished" in again.stdout, again.stdout + again.stderr
    assert tree_of(runs_dir)[1] == reference["tree"]


@pytest.mark.slow
@pytest.mark.parametrize("point", ["run_created:3", "trained:2"])
def test_a_kill_inside_node_creation_or_after_training_resumes_to_the_same_tree(point, short_template, reference,
                                                                                runs_dir):
    killed = research(short_template, env={"AUTORL_FAULT": point})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    check_recovered(runs_dir, reference, recover(short_template))


def kill_moments(seconds: float) -> list[float]:
    """Where the random kills land: spread over the whole session, start-up included."""
    rng = random.Random(KILL_SEED)
    return [round(rng.uniform(0.3, 0.9 * seconds), 2) for _ in range(RANDOM_KILLS)]


@pytest.mark.slow
@pytest.mark.parametrize("case", range(RANDOM_KILLS))
def test_a_kill_at_a_random_moment_resumes_to_the_same_tree(case, short_template, reference, runs_dir):
    moment = kill_moments(reference["seconds"])[case]
    process = subprocess.Popen([*AUTORL, "research", "t", "--template", str(short_template), *ARGS], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        process.communicate(timeout=moment)  # a session that ended first is recovered all the same
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.communicate()
    assert_nothing_left(runs_dir)
    check_recovered(runs_dir, reference, recover(short_template))
