"""Stored records are a format: sessions written by every earlier version read back whole.

A session is run with this version, then its MLflow records are rewritten exactly as
versions 1 and 2 wrote them (``write_as`` below: one tag per node field, no version tag;
version 2 kept the template and workspace under ``autorl.stages.*``). ``show``, ``ls``,
``report`` and ``resume`` must read them as if nothing happened, including a version-2
session stuck the way a kill inside node creation left it (a node run with no record).
"""

import json
import signal

import pytest
from conftest import STANDIN_ARGS, run_cli, tree_of
from mlflow.tracking import MlflowClient

from autorl.storage import records
from autorl.storage.report import list_sessions
from autorl.storage.tracking import Tracker
from search.tree import Node


def fields_as_tags(node: Node) -> dict[str, str]:
    """A node's tags as versions 1 and 2 wrote them (their ``records.node_tags``, kept verbatim)."""
    dumps = records.dumps
    tags = {
        "autorl.node_id": node.id, "autorl.parent_node": node.parent or "base", "autorl.depth": node.depth,
        "autorl.status": node.status.value, "autorl.reason": node.reason, "autorl.proposer": node.proposer,
        "autorl.seed": node.seed, "autorl.step_offset": node.step_offset, "autorl.git_commit": node.commit,
        "mlflow.source.git.commit": node.commit, "autorl.hyperparameters": dumps(node.hyperparameters),
        "autorl.rationale": node.rationale, "autorl.expected_effect": node.expected_effect,
        "autorl.edited": node.edited, "autorl.attempt": node.attempt, "autorl.kept": node.kept,
        "autorl.frozen_violation": node.frozen_violation,
        "autorl.diagnosis": ",".join(f.name for f in node.diagnosis),
        "autorl.findings": dumps([f.to_dict() for f in node.diagnosis]),
        "autorl.comparison": dumps(node.comparison.to_dict()) if node.comparison else "",
        "autorl.verdict": node.comparison.verdict if node.comparison else "",
        "autorl.eval_engine": node.eval_engine, "autorl.worker": node.worker,
        "autorl.timing": dumps(node.timing) if node.timing else "",
        "autorl.eval_metrics": dumps(node.eval_metrics) if node.eval_metrics else "",
    }
    if node.optuna_trial is not None:
        tags["autorl.optuna_trial"] = node.optuna_trial
    return {key: str(value) for key, value in tags.items()}


def write_as(runs_dir, version: int) -> None:
    """Rewrite session ``s`` in the store as ``version`` (1 or 2) wrote it."""
    tracker = Tracker.for_runs_dir(runs_dir)
    client = MlflowClient(tracker.uri)
    session = tracker.find_session("s")
    tags = records.session_tags_of(session)  # whichever version it holds now
    if records.VERSION_KEY in tags:
        client.delete_tag(session.info.run_id, records.VERSION_KEY)
    for old, new in records.RENAMED_SESSION_KEYS.items():
        for key in (old, new):
            if key in session.data.tags:
                client.delete_tag(session.info.run_id, key)
        client.set_tag(session.info.run_id, old if version == 2 else new, tags[new])
    config = json.loads(session.data.tags["autorl.config"])
    config.pop("noise_probe", None)  # an option added after version 2 (its stored configs read it as off)
    client.set_tag(session.info.run_id, "autorl.config", json.dumps(config))
    for run in tracker.node_runs(session.info.run_id):
        node = records.node_from_run(run)
        for key in (records.VERSION_KEY, records.NODE_KEY):
            if key in run.data.tags:
                client.delete_tag(run.info.run_id, key)
        for key, value in fields_as_tags(node).items():
            client.set_tag(run.info.run_id, key, value)


@pytest.mark.slow
def test_a_finished_session_of_an_earlier_version_reads_back_whole(fast_template, runs_dir):
    done = run_cli("research", "t", "--template", str(fast_template), *STANDIN_ARGS)
    assert done.returncode == 0, done.stdout + done.stderr
    data, tree = tree_of(runs_dir)
    for version in (1, 2):
        write_as(runs_dir, version)
        again, tree_again = tree_of(runs_dir)
        assert tree_again == tree, version
        assert again["template"] == data["template"] == "tpl" and again["workspace"] == data["workspace"], version
        assert [n["hyperparameters"] for n in again["nodes"]] == [n["hyperparameters"] for n in data["nodes"]]
        assert [n["diagnosis"] for n in again["nodes"]] == [n["diagnosis"] for n in data["nodes"]]
        (row,) = list_sessions(Tracker.for_runs_dir(runs_dir))
        assert row["template"] == "tpl" and row["resume_note"] == "finished", version
        report = run_cli("report", "s")
        assert report.returncode == 0, report.stdout + report.stderr


@pytest.mark.slow
def test_a_stopped_version_2_session_stuck_on_a_node_without_values_resumes_to_the_same_tree(fast_template, reference,
                                                                                             runs_dir):
    """Killed while a node's run was being created, as version 2 did it (the run created with
    its id only, the tag holding its values not yet written): every resume of it used to
    fail on the missing values."""
    killed = run_cli("research", "t", "--template", str(fast_template), *STANDIN_ARGS,
                     env={"AUTORL_FAULT": "node_recorded:3"})
    assert killed.returncode == -signal.SIGKILL
    write_as(runs_dir, 2)
    tracker = Tracker.for_runs_dir(runs_dir)
    client = MlflowClient(tracker.uri)
    (half,) = [r for r in tracker.node_runs(tracker.find_session("s").info.run_id)
               if r.data.tags["autorl.node_id"] == "n003"]
    for key in set(half.data.tags) - {"mlflow.parentRunId", "autorl.kind", "autorl.session", "autorl.node_id",
                                      "mlflow.runName", "mlflow.user"}:
        client.delete_tag(half.info.run_id, key)
    resumed = run_cli("resume", "s")
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stdout + resumed.stderr
    assert tree_of(runs_dir)[1] == reference
    data = json.loads(run_cli("show", "s", "--json").stdout)
    assert data["train_steps_spent"] == sum(n["steps"] for n in data["nodes"])


@pytest.mark.slow
def test_resume_of_every_session_ls_lists_finishes_it_or_says_why_in_one_line(fast_template, runs_dir):
    """A store holding sessions in every state a user can meet: finished, killed mid-stage,
    killed while being created, its folder deleted, a torn node record, a config holding an
    option this version no longer has."""
    short = ["--template", str(fast_template), "--stages", "2"]
    assert run_cli("research", "t", *short, "--name", "done").returncode == 0
    for name, point in [("killed", "launched:2"), ("creating", "session_run_created"), ("gone", "launched:1"),
                        ("torn", "evaluated:2"), ("older", "launched:2")]:
        assert run_cli("research", "t", *short, "--name", name, env={"AUTORL_FAULT": point}).returncode < 0
    tracker = Tracker.for_runs_dir(runs_dir)
    client = MlflowClient(tracker.uri)
    import shutil

    shutil.rmtree(runs_dir / "sessions" / "gone")
    torn = tracker.find_session("torn")
    first = tracker.node_runs(torn.info.run_id)[0]
    client.set_tag(first.info.run_id, records.NODE_KEY, '{"id": ')
    older = tracker.find_session("older")
    config = json.loads(older.data.tags["autorl.config"]) | {"an_option_since_removed": 3}
    client.set_tag(older.info.run_id, "autorl.config", json.dumps(config))

    listed = json.loads(run_cli("ls", "--json").stdout)
    assert {row["name"] for row in listed} == {"done", "killed", "creating", "gone", "torn", "older"}
    for row in listed:
        resumed = run_cli("resume", row["name"])
        out = resumed.stdout + resumed.stderr
        assert "Traceback" not in out, (row["name"], out)
        if resumed.returncode != 0:
            assert resumed.returncode == 1 and len(resumed.stderr.strip().splitlines()) == 1, (row["name"], out)
            assert resumed.stderr.startswith("error: "), (row["name"], out)
        else:
            assert "finished" in out, (row["name"], out)
    outcome = {row["name"]: row["status"] for row in json.loads(run_cli("ls", "--json").stdout)}
    assert outcome["killed"] == outcome["creating"] == outcome["older"] == "finished"
