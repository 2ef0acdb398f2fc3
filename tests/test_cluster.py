"""Stages on a Ray cluster whose nodes share no folder with the controller: a head and two
worker nodes on this machine (tests/local_cluster.py), the workers started where the
test's folders (the session, the template) are empty; what crosses the cluster crosses it
through the session's artifact store, an MLflow server on loopback. A node is lost mid-stage."""

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from conftest import AUTORL, REPO, make_template, run_cli, wait_until
from local_cluster import LocalCluster, TrackingServer, release_held_stages

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = Path(tempfile.mkdtemp(prefix="autorl-cluster-"))
    started = LocalCluster(root, workers=2, hidden=(tmp_path_factory.getbasetemp(),)).start()
    yield started
    started.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def store(cluster):
    server = TrackingServer(cluster.root / "store").start()
    yield server.uri
    server.stop()


@pytest.fixture(scope="module")
def held_template(tmp_path_factory):
    """Stages that log a step, then hold until a file named ``release`` appears beside their
    metrics (on the node: the test sees every node's folder, the nodes do not see the test's)."""
    return make_template(tmp_path_factory.mktemp("tpl") / "tpl", train_py="held_copy_train.py",
                         evaluate_py="fast_evaluate.py")


def session_env(cluster) -> dict:
    return {**os.environ, "RAY_ADDRESS": cluster.gcs, "AUTORL_RUNS_DIR": os.environ["AUTORL_RUNS_DIR"]}


def first_step_of(runs_dir: Path, name: str) -> dict | None:
    events = runs_dir / "sessions" / name / "channel" / "events.jsonl"
    for line in events.read_text().splitlines() if events.exists() else []:
        event = json.loads(line)
        if event.get("kind") == "step":
            return event
    return None


def command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""  # exited: it holds nothing now


def job_of(cluster, prefix: str):
    from ray.job_submission import JobSubmissionClient

    return [job for job in JobSubmissionClient(cluster.dashboard).list_jobs()
            if job.submission_id and job.submission_id.startswith(prefix)]


def test_a_node_lost_mid_stage_costs_nothing_on_a_cluster_that_shares_no_folder(cluster, store, held_template,
                                                                                 runs_dir):
    assert not any(os.listdir(cluster.root / name / "work") for name in cluster.names)
    session = subprocess.Popen([*AUTORL, "research", "t", "--template", str(held_template), "--stages", "4",
                                "--executor", "ray", "--ray-address", cluster.dashboard, "--name", "lost",
                                "--tracking-uri", store],
                               cwd=REPO, env=session_env(cluster), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    wait_until(lambda: first_step_of(runs_dir, "lost") is not None, "a stage's first step", 180, session)
    step = first_step_of(runs_dir, "lost")  # heard live, from the node, while the stage trains
    node_id = step["node"]
    shown = json.loads(run_cli("show", "lost", "--json").stdout)
    prefix = f"autorl-lost-{shown['mlflow_run_id'][:8]}-{node_id}-a1"
    (job,) = job_of(cluster, prefix)
    assert job.status.value == "RUNNING"
    lost = next(name for name, ray_id in cluster.nodes().items() if ray_id == job.driver_node_id)
    assert lost != "head" and cluster.kill(lost) > 0

    survivor_folder = cluster.root / next(n for n in cluster.names if n != lost) / "work"
    wait_until(lambda: release_held_stages(survivor_folder) or session.poll() is not None, "the session's end", 300)
    out, _ = session.communicate(timeout=60)
    assert session.returncode == 0, out
    assert f"{node_id}: Ray node {job.driver_node_id[:8]} was lost mid-stage" in out
    data = json.loads(run_cli("show", "lost", "--json").stdout)
    assert data["status"] == "finished" and [n["status"] for n in data["nodes"]] == ["succeeded"] * 4
    retried = next(n for n in data["nodes"] if n["id"] == node_id)
    assert "retried after node loss (1)" in retried["worker"]  # the tree says so
    survivor = cluster.nodes()[next(n for n in cluster.names if n != lost)]
    assert retried["worker"].endswith(f"on Ray node {survivor[:8]}; retried after node loss (1)")
    states = {j.submission_id.removeprefix(prefix) or "first": j.status.value for j in job_of(cluster, prefix)}
    assert states == {"first": "FAILED", "-r1": "SUCCEEDED"}

    # nothing lost: every stage's metrics and result reached the controller, and its checkpoint
    # the artifact store (unless retention deleted it: no later stage could start from it)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    nodes = runs_dir / "sessions" / "lost" / "nodes"
    for node in data["nodes"]:
        stored = [a.path for a in client.list_artifacts(node["mlflow_run_id"], "checkpoint")]
        assert (node["checkpoint"], "checkpoint/config.json" in stored) in (("stored", True), ("deleted", False))
        assert [json.loads(line)["step"] for line in (nodes / node["id"] / "metrics.jsonl").open()] == [1, 2]
        assert node["steps"] == 2
    # nothing duplicated: the retried stage's steps are recorded once each
    history = client.get_metric_history(retried["mlflow_run_id"], "reward")
    assert sorted(m.step for m in history) == [1, 2]
    assert data["train_steps_spent"] == 8
    # nothing of the session is in the cluster's object store: what is there is the Jobs API's own
    # (its dashboard's), once the jobs' processes have exited
    from ray.util.state import list_objects

    def owners() -> set[str]:
        objects = list_objects(address=cluster.dashboard, raise_on_missing_output=False)
        return {command_of(o.pid) for o in objects}

    def stray() -> set[str]:
        return {owner for owner in owners() if owner and "dashboard" not in owner}

    deadline = time.monotonic() + 120  # the lost node's job processes may take a while to be reaped
    while (left := stray()) and time.monotonic() < deadline:
        time.sleep(1.0)
    assert not left, f"objects of these processes are still in Ray's object store: {left}"


def test_stages_go_only_where_their_resources_are(cluster, store, held_template, runs_dir):
    """Two CPUs a stage, on nodes of one CPU each: no node can take it, and the session says
    so rather than run it anywhere."""
    done = run_cli("research", "t", "--template", str(held_template), "--stages", "1", "--executor", "ray",
                   "--ray-address", cluster.dashboard, "--trial-cpus", "2", "--name", "big", "--tracking-uri", store,
                   env={"RAY_ADDRESS": cluster.gcs})
    assert done.returncode != 0 and ("n001: no node of the cluster has 2 CPUs free to give a stage (the largest has 1 "
                                     "CPUs)") in done.stdout + done.stderr, done.stdout + done.stderr
    assert job_of(cluster, "autorl-big-") == []  # nothing was submitted to wait forever
