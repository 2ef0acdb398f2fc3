"""The tracking store: concurrent starts cannot break it, a half-migrated one is repaired or
refused with the fix, reading commands create nothing, and a session being created is
never left half-made (an orphan folder without an MLflow run)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest
from conftest import AUTORL, REPO, make_template, run_cli

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


@pytest.mark.slow  # several CLI processes
def test_reading_a_half_migrated_store_says_how_to_repair_it(runs_dir, tracker):
    """Holding no runs, a store a killed first start left half-made is no store yet to a
    command that reads (`autorl research` remakes it); holding runs, it says how to repair it."""
    set_revision(runs_dir / "mlflow.db", EARLIER_REVISION)
    with sqlite3.connect(runs_dir / "mlflow.db") as connection:  # what a killed migration leaves
        connection.execute("CREATE TABLE _alembic_tmp_latest_metrics (x INTEGER)")
    done = run_cli("ls", "--json", "--runs-dir", str(runs_dir))
    assert done.returncode == 0 and json.loads(done.stdout) == []
    resumed = run_cli("resume", "s", "--runs-dir", str(runs_dir))
    assert resumed.returncode == 1 and resumed.stderr.startswith("error: no session named 's'")

    tracker.ensure_store()  # migrated again, then a session recorded, then half-migrated
    tracker.start_session("s", params={}, tags={})
    set_revision(runs_dir / "mlflow.db", EARLIER_REVISION)
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


@pytest.mark.slow  # several CLI processes
def test_ls_reads_a_session_config_too_long_for_a_tag(tmp_path, runs_dir, tracker):
    """A long topic puts the session's config past TAG_LIMIT, so its tag points at an
    artifact; `ls` reads the whole config through the pointer instead of parsing the pointer."""
    from mlflow.tracking import MlflowClient

    from autorl.config import make_config
    from autorl.session import create_session
    from autorl.stages import template as templates
    from autorl.storage.tracking import LONG_TAG, TAG_LIMIT

    template = templates.load(str(make_template(tmp_path / "tpl", train_py="copy_train.py",
                                                evaluate_py="fast_evaluate.py")))
    topic = ("which learning-rate schedule helps digit sorting most, and why " * 100)[:TAG_LIMIT - 100].strip()
    config = make_config(name="long", topic=topic, template=str(template.path), stages=1, runs_dir=runs_dir,
                         tracking_uri=tracker.uri)
    create_session(config, template, tracker).finish("stopped", "stopped by the test")
    [stored] = MlflowClient(tracker.uri).search_runs([tracker.ensure_store()], "tags.`autorl.kind` = 'session'")
    assert stored.data.tags["autorl.config"].startswith(LONG_TAG)  # the case: a pointer, not the JSON
    done = run_cli("ls", "--runs-dir", str(runs_dir))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "long" in done.stdout and "stopped" in done.stdout
    [row] = listed(runs_dir)
    assert (row["name"], row["topic"], row["resumable"]) == ("long", topic, True), row
    assert row["resume_note"] == "stopped: stopped by the test"


# A store creation SIGKILLed right after a given SQL statement ran: the state a kill at that
# moment of `autorl research` leaves (the hook only picks the moment; the kill is real).
KILLED_CREATION = """
import os, re, signal, sys, time
from pathlib import Path
from sqlalchemy import event
from sqlalchemy.engine import Engine
from autorl.storage.store import prepare_sqlite
import mlflow.store.db.utils

@event.listens_for(Engine, "after_cursor_execute")
def kill_after(conn, cursor, statement, parameters, context, executemany):
    if re.search(sys.argv[2], statement):
        os.kill(os.getpid(), signal.SIGKILL)

if sys.argv[3:] == ["on-the-second"]:  # start just after a new second begins
    time.sleep(1 - time.time() % 1)
prepare_sqlite(f"sqlite:///{sys.argv[1]}", Path(sys.argv[1]))
"""

# what each kill leaves, and what upgrading it then fails on
KILL_STATES = {
    "CREATE TABLE webhooks": "table webhooks already exists",  # the migration's tables, its version not recorded
    "ALTER TABLE metrics ADD COLUMN step": "duplicate column name: step",  # the first migration, no version at all
    "CREATE TABLE _alembic_tmp_tags": "table _alembic_tmp_tags already exists",  # a table rebuild's copy
}


def kill_creation_after(statement: str, runs_dir, *extra: str) -> None:
    runs_dir.mkdir(exist_ok=True)
    killed = subprocess.run([sys.executable, "-c", KILLED_CREATION, str(runs_dir / "mlflow.db"), statement, *extra],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]


def upgrade_failure(database) -> str:
    """What MLflow's own first use says of a copy of the store (the store is left as it is)."""
    copy = database.parent / "copy" / database.name
    copy.parent.mkdir()
    for part in database.parent.glob(database.name + "*"):
        shutil.copy(part, copy.parent / part.name)
    done = subprocess.run([sys.executable, "-c", "import sys; from mlflow.tracking import MlflowClient; "
                           "MlflowClient(sys.argv[1]).search_experiments()", f"sqlite:///{copy}"],
                          capture_output=True, text=True, timeout=300)
    shutil.rmtree(copy.parent)
    return done.stderr


@pytest.mark.slow
@pytest.mark.fresh_store
@pytest.mark.parametrize("statement", KILL_STATES)
def test_a_store_creation_killed_midway_is_made_again(runs_dir, statement):
    kill_creation_after(statement, runs_dir)
    assert KILL_STATES[statement] in upgrade_failure(runs_dir / "mlflow.db")
    from mlflow.tracking import MlflowClient

    experiment = Tracker.for_runs_dir(runs_dir).ensure_store()
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    run = client.create_run(experiment, run_name="after")
    assert [r.info.run_id for r in client.search_runs([experiment])] == [run.info.run_id]
    assert len(list(runs_dir.glob("mlflow.db.broken-*"))) == 1


@pytest.mark.slow
@pytest.mark.fresh_store
def test_research_after_a_kill_that_half_made_the_store_just_works(tmp_path, runs_dir):
    """The reported case: a first `autorl research` killed while MLflow created the store
    leaves it half-made; holding no runs, it is no store yet to reading commands (`resume`
    says there is no such session, which sends the user back to `research`), and the same
    research again works."""
    kill_creation_after("CREATE TABLE webhooks", runs_dir)
    read = run_cli("ls", "--runs-dir", str(runs_dir))
    assert read.returncode == 0 and "creates it" in read.stdout and not read.stderr, read.stdout + read.stderr
    resumed = run_cli("resume", "again", "--runs-dir", str(runs_dir))
    assert resumed.returncode == 1 and resumed.stderr.startswith("error: no session named 'again'"), resumed.stderr
    template = make_template(tmp_path / "tpl", train_py="copy_train.py", evaluate_py="fast_evaluate.py")
    done = run_cli("research", "t", "--name", "again", "--stages", "1", "--template", str(template),
                   "--runs-dir", str(runs_dir))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    assert [(s["name"], s["status"]) for s in listed(runs_dir)] == [("again", "finished")]
    assert len(list(runs_dir.glob("mlflow.db.broken-*"))) == 1


@pytest.mark.slow
@pytest.mark.fresh_store
def test_a_repair_killed_while_remaking_keeps_both_broken_stores(runs_dir):
    """The remake after moving a half-made store aside can itself be killed; the next start
    moves that one aside too, under a name of its own (within the same second as well)."""
    kill_creation_after("CREATE TABLE webhooks", runs_dir)
    # upgrading that fails, it is moved aside, and the remake is killed in its first migration,
    # a tenth of a second into a second; the next start moves the new one aside within that second
    kill_creation_after("ALTER TABLE metrics ADD COLUMN step", runs_dir, "on-the-second")
    assert len(list(runs_dir.glob("mlflow.db.broken-*"))) == 1
    Tracker.for_runs_dir(runs_dir).ensure_store()
    assert len(list(runs_dir.glob("mlflow.db.broken-*"))) == 2


def test_a_store_that_is_not_a_database_is_refused_and_kept(runs_dir):
    (runs_dir / "mlflow.db").write_bytes(b"not a database, maybe the user's file " * 200)
    with pytest.raises(TrackingError, match="cannot be migrated .* nor read"):
        Tracker.for_runs_dir(runs_dir).ensure_store()
    assert (runs_dir / "mlflow.db").read_bytes().startswith(b"not a database")
    assert not list(runs_dir.glob("mlflow.db.broken-*"))
