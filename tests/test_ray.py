"""Stages as Ray jobs on a real local Ray head (--executor ray): side by side, followed again
after the controller is killed (not retrained), stopped by Ctrl-C. Fast stand-in stages."""

import json
import os
import signal
import subprocess

import pytest
from conftest import AUTORL, REPO, ignore_sigint, make_template, run_cli, wait_until
from test_parallel import intervals, most_at_once

from autorl.stages.ray_stages import LOCAL_ADDRESS, RAY_ENV, answers, start_local_head, stop_local_head

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_head():
    """The Ray head on this machine: one that already answers, else one started (and stopped) here."""
    started = not answers(LOCAL_ADDRESS)
    address = start_local_head(cpus=2)
    yield address
    if started:
        stop_local_head()


@pytest.fixture(scope="module")
def slow_template(tmp_path_factory):
    return make_template(tmp_path_factory.mktemp("tpl") / "tpl", train_py="slow_copy_train.py",
                         evaluate_py="fast_evaluate.py")


def job_states(name: str, runs_dir) -> dict[str, str]:
    """The state of each Ray job of session ``name`` (its jobs' ids carry its MLflow run id)."""
    from ray.job_submission import JobSubmissionClient

    shown = json.loads(run_cli("show", name, "--json").stdout)
    prefix = f"autorl-{name}-{shown['mlflow_run_id'][:8]}-"
    client = JobSubmissionClient(LOCAL_ADDRESS)
    return {job.submission_id: str(job.status.value) for job in client.list_jobs()
            if job.submission_id and job.submission_id.startswith(prefix)}


def test_a_parallel_session_runs_its_stages_as_ray_jobs(ray_head, slow_template, runs_dir):
    done = run_cli("research", "on ray", "--template", str(slow_template), "--stages", "3", "--parallel", "2",
                   "--executor", "ray", "--name", "onray", env=RAY_ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"stages run as Ray jobs on {ray_head}" in done.stdout
    data = json.loads(run_cli("show", "onray", "--json").stdout)
    assert data["status"] == "finished" and [n["status"] for n in data["nodes"]] == ["succeeded"] * 3
    assert most_at_once(intervals(data)) == 2
    states = job_states("onray", runs_dir)
    assert len(states) == 3 and set(states.values()) == {"SUCCEEDED"}


def test_a_killed_controller_follows_its_running_ray_jobs_on_resume(ray_head, slow_template, runs_dir):
    killed = run_cli("research", "on ray", "--template", str(slow_template), "--stages", "3", "--parallel", "2",
                     "--executor", "ray", "--name", "rayk", env={**RAY_ENV, "AUTORL_FAULT": "mid_training:2"})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    resumed = run_cli("resume", "rayk", env=RAY_ENV)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.count("outlived the stop; following it") == 2
    data = json.loads(run_cli("show", "rayk", "--json").stdout)
    assert data["status"] == "finished" and [n["status"] for n in data["nodes"]] == ["succeeded"] * 3
    assert [n["attempt"] for n in data["nodes"]] == [1, 1, 1]  # followed, not trained again
    assert len(job_states("rayk", runs_dir)) == 3  # one job per node: none was submitted twice


def test_ctrl_c_stops_the_sessions_ray_jobs(ray_head, runs_dir, tmp_path):
    """Started as a background job would be (SIGINT ignored); stopped while its first job is held mid-stage."""
    template = make_template(tmp_path / "tpl", train_py="held_copy_train.py", evaluate_py="fast_evaluate.py")
    process = subprocess.Popen([*AUTORL, "research", "on ray", "--template", str(template), "--stages", "9",
                                "--executor", "ray", "--name", "rayc"], cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, **RAY_ENV}, preexec_fn=ignore_sigint)
    first = runs_dir / "sessions" / "rayc" / "nodes" / "n001" / "metrics.jsonl"
    wait_until(first.exists, "the first Ray job starts training", process=process)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, out + err
    assert set(job_states("rayc", runs_dir).values()) == {"STOPPED"}


def test_an_unreachable_ray_cluster_is_one_clear_error_and_creates_nothing(runs_dir):
    done = run_cli("research", "on ray", "--executor", "ray", "--ray-address", "http://127.0.0.1:9", "--name", "nor",
                   env=RAY_ENV)
    assert done.returncode == 1
    assert "--ray-address: no Ray cluster answers at http://127.0.0.1:9" in done.stderr
    assert not (runs_dir / "sessions" / "nor").exists() and not json.loads(run_cli("ls", "--json").stdout)
