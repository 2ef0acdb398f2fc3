"""A shared store: real PostgreSQL and a real `mlflow server` on loopback, started and
stopped by `autorl server up|down`; sessions of two users share it (fast stand-in stages)."""

import json
import shutil
import signal
import socket
import tempfile
from pathlib import Path

import optuna
import pytest
from conftest import make_template, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    shutil.which("pg_ctl") is None and not list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")),
    reason="PostgreSQL's binaries (initdb, pg_ctl) are not installed")]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    folder = Path(tempfile.mkdtemp(prefix="autorl-server-"))
    folder.chmod(0o755)  # the postgres user must reach its data folder
    port, pg_port = free_port(), free_port()
    up = run_cli("server", "up", "--dir", str(folder / "pair"), "--port", str(port), "--pg-port", str(pg_port),
                 timeout=300)
    assert up.returncode == 0, up.stderr
    info = json.loads((folder / "pair" / "server.json").read_text())
    yield {"tracking": f"http://127.0.0.1:{port}",
           "study": f"postgresql://postgres@127.0.0.1:{pg_port}/optuna", "folder": folder / "pair"}
    down = run_cli("server", "down", "--dir", str(folder / "pair"))
    assert down.returncode == 0, down.stderr
    assert run_cli("server", "status", "--dir", str(folder / "pair")).returncode == 1
    shutil.rmtree(folder, ignore_errors=True)
    assert info["mlflow_port"] == port


@pytest.fixture(scope="module")
def fast_template(tmp_path_factory):
    return make_template(tmp_path_factory.mktemp("tpl") / "tpl", train_py="copy_train.py",
                         evaluate_py="fast_evaluate.py")


def test_two_users_share_one_server_and_study_database(server, fast_template, tmp_path):
    store = ["--tracking-uri", server["tracking"]]
    for user in ("ann", "bob"):  # each with their own runs directory (checkpoints), one shared store
        done = run_cli("research", "t", "--template", str(fast_template), "--stages", "2", "--name", f"{user}-s",
                       "--runs-dir", str(tmp_path / user), *store, "--study-storage", server["study"])
        assert done.returncode == 0, done.stderr
        # the hints it prints work as printed: the session folder remembers its store
        assert f"autorl show {user}-s --runs-dir {tmp_path / user}" in done.stdout
        assert f"browse runs:    {server['tracking']} (the MLflow server's UI)" in done.stdout
        as_printed = run_cli("show", f"{user}-s", "--json", "--runs-dir", str(tmp_path / user))
        assert as_printed.returncode == 0 and json.loads(as_printed.stdout)["name"] == f"{user}-s"
    listed = json.loads(run_cli("ls", "--json", "--runs-dir", str(tmp_path / "ann"), *store).stdout)
    assert {"ann-s", "bob-s"} <= {s["name"] for s in listed}
    shown = json.loads(run_cli("show", "bob-s", "--json", "--runs-dir", str(tmp_path / "ann"), *store).stdout)
    assert shown["status"] == "finished" and len(shown["nodes"]) == 2
    study = optuna.load_study(study_name="ann-s", storage=server["study"])
    assert len([t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]) == 2
    text = run_cli("show", "ann-s", "--runs-dir", str(tmp_path / "ann"), *store).stdout
    assert f"optuna-dashboard {server['study']}" in text
    again = run_cli("resume", "ann-s", "--runs-dir", str(tmp_path / "ann"), *store)
    assert again.returncode == 0 and "already finished" in again.stdout


def test_an_unreachable_server_is_one_clear_error_and_creates_nothing(server, fast_template, tmp_path):
    closed = free_port()
    done = run_cli("research", "t", "--template", str(fast_template), "--stages", "1", "--runs-dir",
                   str(tmp_path / "nothing"), "--tracking-uri", f"http://127.0.0.1:{closed}")
    assert done.returncode == 1 and "does not answer" in done.stderr and not (tmp_path / "nothing").exists()
    done = run_cli("research", "t", "--template", str(fast_template), "--stages", "1", "--runs-dir",
                   str(tmp_path / "runs"), "--tracking-uri", server["tracking"], "--name", "lost",
                   "--study-storage", f"postgresql://postgres@127.0.0.1:{closed}/optuna")
    assert done.returncode == 1 and "--study-storage: cannot open" in done.stderr
    listed = json.loads(run_cli("ls", "--json", "--tracking-uri", server["tracking"]).stdout)
    assert "lost" not in {s["name"] for s in listed}


def shown_tree(name: str, store: list[str], runs) -> list:
    done = run_cli("show", name, "--json", "--runs-dir", str(runs), *store)
    assert done.returncode == 0, done.stderr
    nodes = json.loads(done.stdout)["nodes"]
    return [(n["id"], n["parent"], n["status"], n["val_score"], n["hyperparameters"]) for n in nodes]


def test_a_session_resumes_from_the_server_alone(server, fast_template, tmp_path):
    """Killed, its whole runs folder deleted, resumed into an empty one: the tree of a session left alone."""
    store = ["--tracking-uri", server["tracking"]]
    # memory off: "cut" would otherwise read "whole" as an earlier session and search differently
    args = ["research", "t", "--template", str(fast_template), "--stages", "4", "--seed", "3", "--memory", "off",
            *store]
    whole = run_cli(*args, "--name", "whole", "--runs-dir", str(tmp_path / "a"))
    assert whole.returncode == 0, whole.stderr
    killed = run_cli(*args, "--name", "cut", "--runs-dir", str(tmp_path / "b"), env={"AUTORL_FAULT": "evaluated:2"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    shutil.rmtree(tmp_path / "b")
    resumed = run_cli("resume", "cut", "--runs-dir", str(tmp_path / "c"), *store)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "rebuilt the session folder from MLflow" in resumed.stdout
    assert shown_tree("cut", store, tmp_path / "d") == shown_tree("whole", store, tmp_path / "d")


def test_a_session_killed_while_its_noise_probe_trains_resumes_from_the_server_alone(server, fast_template, tmp_path):
    """The probe's node and the spread it measured live in MLflow like every other: killed while the
    repeat trains, the runs folder deleted, resumed into an empty one, the tree of a session left alone."""
    store = ["--tracking-uri", server["tracking"]]
    args = ["research", "t", "--template", str(fast_template), "--stages", "5", "--seed", "5", "--memory", "off",
            *store]
    whole = run_cli(*args, "--name", "whole-probe", "--runs-dir", str(tmp_path / "a"))
    assert whole.returncode == 0, whole.stderr
    killed = run_cli(*args, "--name", "cut-probe", "--runs-dir", str(tmp_path / "b"),
                     env={"AUTORL_FAULT": "mid_training:2"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    shutil.rmtree(tmp_path / "b")
    resumed = run_cli("resume", "cut-probe", "--runs-dir", str(tmp_path / "c"), *store)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert shown_tree("cut-probe", store, tmp_path / "d") == shown_tree("whole-probe", store, tmp_path / "d")
    shown = json.loads(run_cli("show", "cut-probe", "--json", "--runs-dir", str(tmp_path / "d"), *store).stdout)
    assert [n["repeat_of"] for n in shown["nodes"]][:2] == [None, "n001"]
    assert shown["seed_noise"].startswith("sd ") and "(n002 repeats n001: " in shown["seed_noise"]
