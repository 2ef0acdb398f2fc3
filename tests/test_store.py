"""The tracking store: concurrent starts cannot break it, a half-migrated one is repaired or
refused with the fix, reading commands create nothing, and a session being created is
never left half-made (an orphan folder without an MLflow run)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess

import pytest
from conftest import AUTORL, REPO, run_cli

from autorl.errors import TrackingError
from autorl.storage.tracking import Tracker

EARLIER_REVISION = "bd07f7e963c5"  # the one before MLflow adds runs.deleted_time


def research_killed_at(point: str, runs_dir, name: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "AUTORL_FAULT": point, "AUTORL_RUNS_DIR": str(runs_dir)}
    return subprocess.Popen([*AUTORL, "research", "race", "--name", name, "--stages", "1", "--workers", "cold",
                             *extra], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def listed(runs_dir) -> list[dict]:
    done = run_cli("ls", "--json", "--runs-dir", str(runs_dir))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.fresh_store
def test_eight_sessions_started_together_on_a_fresh_store_all_get_created(runs_dir):
    starts = [research_killed_at("session_run_created", runs_dir, f"race{i}") for i in range(8)]
    outputs = [p.communicate(timeout=300) for p in starts]
    for process, (_, stderr) in zip(starts, outputs):
        assert process.returncode == -9, stderr[-2000:]  # reached the kill point: the store was fine
    assert sorted(s["name"] for s in listed(runs_dir)) == [f"race{i}" for i in range(8)]
    assert not list(runs_dir.glob("mlflow.db.broken-*"))


def set_revision(database, revision: str) -> None:
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE alembic_version SET version_num = ?", (revision,))


@pytest.mark.slow  # seconds each: the full suite runs it, the edit loop does not
def test_a_half_migrated_store_without_runs_is_made_again(runs_dir):
    database = runs_dir / "mlflow.db"
    set_revision(database, EARLIER_REVISION)  # tables at head, version behind: upgrading fails
    Tracker.for_runs_dir(runs_dir).ensure_store()
    assert len(list(runs_dir.glob("mlflow.db.broken-*"))) == 1
    assert listed(runs_dir) == []


def test_a_half_migrated_store_with_runs_is_refused_with_the_fix(runs_dir, tracker):
    tracker.start_session("kept", params={}, tags={})
    set_revision(runs_dir / "mlflow.db", EARLIER_REVISION)
    with pytest.raises(TrackingError, match="half-migrated and holds runs.*mlflow db upgrade"):
        Tracker.for_runs_dir(runs_dir).ensure_store()
    assert not list(runs_dir.glob("mlflow.db.broken-*"))  # nothing of the user's was moved


@pytest.mark.parametrize("command", [["ls"], ["show", "nosuch"], ["resume", "nosuch"], ["doctor", "--sandbox", "none"]])
def test_reading_commands_create_nothing(tmp_path, command):
    runs = tmp_path / "never-made"
    done = run_cli(*command, "--runs-dir", str(runs))
    assert "Traceback" not in done.stderr
    assert not runs.exists()
    if command[0] in ("show", "resume"):
        assert done.returncode == 1 and "no session named 'nosuch'" in done.stderr


def test_a_tracking_uri_in_a_missing_folder_is_refused_not_created(tmp_path):
    missing = tmp_path / "no" / "such"
    for command, code in ((["ls"], 0), (["show", "x"], 1), (["research", "topic", "--stages", "1"], 1)):
        done = run_cli(*command, "--tracking-uri", f"sqlite:///{missing}/x.db",
                       "--runs-dir", str(tmp_path / "fresh-runs"))
        assert done.returncode == code and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert not missing.exists() and not (tmp_path / "fresh-runs").exists()
        if command == ["ls"]:
            assert "no tracking store" in done.stdout
    assert "folder" in done.stderr and "does not exist" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("point", ["session_reserved", "workspace_made"])
def test_a_session_killed_while_being_created_leaves_no_orphan(runs_dir, point):
    first = research_killed_at(point, runs_dir, "orphan")
    first.communicate(timeout=300)
    assert first.returncode == -9
    assert listed(runs_dir) == []  # no run: it never became a session
    done = run_cli("resume", "orphan", "--runs-dir", str(runs_dir))
    assert done.returncode == 1 and "no session named 'orphan'" in done.stderr
    again = research_killed_at("session_run_created", runs_dir, "orphan")  # the name is free again
    again.communicate(timeout=300)
    assert again.returncode == -9
    assert [s["name"] for s in listed(runs_dir)] == ["orphan"]


def test_a_session_folder_without_the_creating_mark_is_not_taken_over(runs_dir):
    (runs_dir / "sessions" / "someone").mkdir(parents=True)
    (runs_dir / "sessions" / "someone" / "notes.txt").write_text("mine")
    done = run_cli("research", "t", "--name", "someone", "--stages", "1", "--runs-dir", str(runs_dir))
    assert done.returncode == 1 and "already exists" in done.stderr
    assert (runs_dir / "sessions" / "someone" / "notes.txt").read_text() == "mine"
    shutil.rmtree(runs_dir / "sessions")


def test_reading_a_half_migrated_store_says_how_to_repair_it(runs_dir):
    set_revision(runs_dir / "mlflow.db", EARLIER_REVISION)
    with sqlite3.connect(runs_dir / "mlflow.db") as connection:  # what a killed migration leaves
        connection.execute("CREATE TABLE _alembic_tmp_latest_metrics (x INTEGER)")
    done = run_cli("ls", "--runs-dir", str(runs_dir))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "`autorl research` remakes it when it holds no runs" in done.stderr


def test_an_unknown_tracking_scheme_is_one_line():
    done = run_cli("ls", "--tracking-uri", "foo://bar")
    assert done.returncode == 1 and "Traceback" not in done.stderr and "pass a sqlite:///PATH" in done.stderr


def test_runs_directory_write_checks_do_not_race(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from autorl.config import prepare_runs_dir

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: prepare_runs_dir(tmp_path / "probed"), range(400)))
    assert list((tmp_path / "probed").iterdir()) == []
