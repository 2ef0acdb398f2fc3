"""Shared fixtures: isolated runs directories and editable template copies.

No network and no mocks of autorl's own code: tests run the real CLI, real MLflow on
a temporary SQLite file, real git, real Optuna storage and real TRL on the tiny model.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autorl.stages import template as templates

REPO = Path(__file__).resolve().parent.parent
EXPERIMENTS = Path(__file__).resolve().parent / "experiments"
AUTORL = [sys.executable, "-m", "autorl"]


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory) -> Path:
    """A real MLflow SQLite file whose schema was created once for the whole run.

    Creating and migrating the schema takes seconds, and every test that opens a fresh
    runs directory would pay it again; a copy of this file is the same store, already
    migrated. Tests marked ``fresh_store`` (the end-to-end session) start from nothing.
    """
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = tmp_path_factory.mktemp("store")
    SqlAlchemyStore(f"sqlite:///{folder / 'mlflow.db'}", str(folder / "artifacts"))
    return folder / "mlflow.db"


@pytest.fixture(autouse=True)
def isolated_runs(tmp_path, monkeypatch, request, migrated_store):
    """Every test gets its own runs directory; nothing touches ./runs."""
    runs = tmp_path / "runs"
    if request.node.get_closest_marker("fresh_store") is None:
        runs.mkdir()
        shutil.copyfile(migrated_store, runs / "mlflow.db")
    monkeypatch.setenv("AUTORL_RUNS_DIR", str(runs))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")  # only --tracking-uri may point elsewhere
    return runs


@pytest.fixture
def runs_dir(isolated_runs) -> Path:
    return isolated_runs


def make_template(dest: Path, train_py: str | None = None, space: dict | None = None, wall_seconds: int | None = None,
                  evaluate_py: str | None = None) -> Path:
    """Copy the arith template to ``dest``, optionally replacing train.py or env/evaluate.py,
    narrowing the space (``{"max_steps": "[4]"}`` sets choices) or the stage wall budget."""
    templates.copy_to(templates.load("arith"), dest)
    if train_py is not None:
        (dest / "train.py").write_text((EXPERIMENTS / train_py).read_text())
    if evaluate_py is not None:
        target = dest / "env" / "evaluate.py"
        target.chmod(0o644)
        target.write_text((EXPERIMENTS / evaluate_py).read_text())
    if space:
        narrow_space(dest, space)
    if wall_seconds is not None:
        set_constants(dest, wall_seconds=wall_seconds)
    return dest


def narrow_space(template: Path, choices: dict[str, str]) -> None:
    """Give categorical parameters new choices (``{"max_steps": "[4]"}``); the first is the default."""
    path = template / "space.toml"
    text = path.read_text()
    for name, values in choices.items():
        table = re.search(rf"^\[{name}\]\n(?:(?!\[).*\n?)*", text, re.M)
        body = re.sub(r"^choices = .*$", f"choices = {values}", table.group(0), flags=re.M)
        body = re.sub(r"^default = .*$", f"default = {values.strip('[]').split(',')[0].strip()}", body, flags=re.M)
        body = re.sub(r"^grid = .*\n", "", body, flags=re.M)
        text = text.replace(table.group(0), body)
    path.write_text(text)


def set_constants(template: Path, **values) -> None:
    """Set ``key = value`` lines of env/constants.toml (the first line of each key)."""
    path = template / "env" / "constants.toml"
    path.chmod(0o644)
    text = path.read_text()
    for key, value in values.items():
        text = re.sub(rf"^{key} = .*$", f"{key} = {json.dumps(value)}", text, count=1, flags=re.M)
    path.write_text(text)


def run_cli(*args: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real ``autorl`` command in a subprocess."""
    return subprocess.run(
        [*AUTORL, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})}
    )


@pytest.fixture
def tracker(runs_dir):
    from autorl.config import prepare_runs_dir
    from autorl.storage.tracking import Tracker

    return Tracker.for_runs_dir(prepare_runs_dir(runs_dir))


def copy_model(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest)


def ignore_sigint() -> None:
    """preexec_fn: start a process the way a background job (`nohup cmd &`) or cron does,
    with SIGINT ignored; only a handler of the process's own makes it stoppable by SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def releasing(nodes_dir: Path, hold: frozenset[str] = frozenset()):
    """Let the stages of held_copy_train.py finish: a ``release`` file goes into every node
    folder that appears, except those named in ``hold``, which stay mid-stage until the
    block ends. Tests stop sessions at a known state this way, never after a sleep."""
    done = threading.Event()

    def release_all() -> None:
        while not done.wait(0.05):
            for node in nodes_dir.glob("n*"):
                if node.name not in hold and not (node / "release").exists():
                    (node / "release").touch()

    thread = threading.Thread(target=release_all, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def wait_until(condition, what: str, timeout: float = 120, process: subprocess.Popen | None = None) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` (and the process's output if it died)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process ended before {what}: {process.communicate()}")
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)


# -- a stand-in session and its tree, shared by the resume and record-format tests --------------

STANDIN_ARGS = ["--stages", "4", "--seed", "3", "--name", "s"]


@pytest.fixture(scope="module")
def fast_template(tmp_path_factory):
    return make_template(tmp_path_factory.mktemp("tpl") / "tpl", train_py="copy_train.py",
                         evaluate_py="fast_evaluate.py")


def read_back(runs_dir, name):
    """A session as `autorl show --json` prints it (in-process: the CLI itself is tested elsewhere)."""
    from autorl.storage.report import show_session
    from autorl.storage.tracking import Tracker

    return json.loads(json.dumps(show_session(Tracker.for_runs_dir(runs_dir), name)))


def tree_of(runs_dir):
    data = read_back(runs_dir, "s")
    return data, [(n["id"], n["parent"], n["status"], n["val_score"], json.dumps(n["hyperparameters"], sort_keys=True))
                  for n in data["nodes"]]


@pytest.fixture(scope="module")
def reference(fast_template, tmp_path_factory):
    runs = tmp_path_factory.mktemp("reference")
    done = run_cli("research", "t", "--template", str(fast_template), *STANDIN_ARGS, "--runs-dir", str(runs))
    assert done.returncode == 0, done.stdout + done.stderr
    return tree_of(runs)[1]
