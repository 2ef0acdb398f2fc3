"""Misbehaving experiments: the node fails with a reason, the session goes on or stops cleanly."""

import json
from pathlib import Path

import pytest
from conftest import make_template, run_cli
from mlflow.tracking import MlflowClient

from autorl.config import make_config
from autorl.errors import FrozenFileError
from autorl.session import create_session
from autorl.stages import template as templates
from sandbox import bwrap_works

pytestmark = pytest.mark.slow  # whole CLI sessions in subprocesses


def test_crashing_and_hanging_stages_fail_and_the_session_finishes(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="crash_or_hang_train.py", wall_seconds=4,
                             evaluate_py="fast_evaluate.py")
    done = run_cli("research", "robustness", "--template", str(template), "--stages", "3", "--name", "bad")
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(run_cli("show", "bad", "--json").stdout)
    crashed, hung, fine = data["nodes"]
    assert crashed["status"] == "failed" and "RuntimeError: deliberate crash in train.py" in crashed["reason"]
    assert hung["status"] == "failed" and "timed out after 4s" in hung["reason"]
    assert fine["status"] == "succeeded" and data["status"] == "finished"
    assert crashed["mlflow_status"] == hung["mlflow_status"] == "FAILED"
    assert data["best"]["id"] == fine["id"]


def test_frozen_file_changed_between_stages_refuses_scoring(tmp_path, runs_dir, tracker):
    template = templates.load(str(make_template(tmp_path / "tpl", train_py="copy_train.py",
                                                evaluate_py="fast_evaluate.py")))
    config = make_config(name="guarded", topic="t", template=str(template.path), stages=3,
                         runs_dir=runs_dir, tracking_uri=tracker.uri)
    controller = create_session(config, template, tracker)
    controller.scoring.base()
    first = controller.launch(controller.propose_next())
    assert first.scored

    evaluator = controller.parts.workspace.path / "env" / "evaluate.py"
    evaluator.chmod(0o644)
    evaluator.write_text(evaluator.read_text().replace('"mean": mean', '"mean": 1.0'))
    with pytest.raises(FrozenFileError, match=r"launch refused.*env/evaluate.py \(modified\)"):
        controller.run()
    run = MlflowClient(tracker.uri).get_run(controller.session_run_id)
    assert run.info.status == "FAILED"
    assert "evaluate.py (modified)" in run.data.tags["autorl.reason"]


@pytest.mark.parametrize("sandbox", [
    pytest.param("bwrap", marks=pytest.mark.skipif(not bwrap_works()[0], reason="bubblewrap unavailable")), "none"])
def test_experiment_that_tampers_with_the_env_is_flagged_and_the_session_goes_on(tmp_path, runs_dir, sandbox):
    template = make_template(tmp_path / "tpl", train_py="tamper_train.py", evaluate_py="fast_evaluate.py")
    done = run_cli("research", "tamper", "--template", str(template), "--stages", "2", "--name", "tamper",
                   "--sandbox", sandbox)
    assert done.returncode == 1, done.stdout + done.stderr  # every stage failed: the session did not succeed
    data = json.loads(run_cli("show", "tamper", "--json").stdout)
    assert data["status"] == "failed" and "no stage succeeded" in data["reason"] and len(data["nodes"]) == 2
    for node in data["nodes"]:
        assert node["status"] == "failed" and node["val_score"] is None
        if sandbox == "bwrap":  # blocked: env/ is mounted read-only
            assert "Read-only file system" in node["reason"]
        else:  # detected, flagged, and put back
            assert "env/task.py (modified)" in node["reason"] and "restored" in node["reason"]
    task = Path(data["workspace"]) / "env" / "task.py"
    assert "True or extract_answer" not in task.read_text()


def test_a_trial_killed_by_the_oom_killer_fails_with_the_reason(tmp_path, runs_dir):
    from sandbox.cgroups import Limits
    from sandbox.tiers import Sandbox

    if Sandbox(Limits()).cgroups is None:
        pytest.skip("no writable cgroup on this machine")
    template = make_template(tmp_path / "tpl", train_py="memory_hog_train.py", evaluate_py="fast_evaluate.py")
    done = run_cli("research", "oom", "--template", str(template), "--stages", "2", "--name", "oom",
                   "--trial-memory", "0.5")
    assert done.returncode == 1, done.stdout + done.stderr  # no stage succeeded
    data = json.loads(run_cli("show", "oom", "--json").stdout)
    assert data["status"] == "failed" and len(data["nodes"]) == 2
    assert all(n["status"] == "failed" and "out of memory" in n["reason"] for n in data["nodes"])


def test_a_session_stops_when_its_target_is_reached(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="copy_train.py", evaluate_py="fast_evaluate.py")
    done = run_cli("research", "reach 30%", "--template", str(template), "--stages", "6", "--name", "goal",
                   "--target", "0.3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the topic states a target of 0.3" not in done.stdout  # --target given: no suggestion
    data = json.loads(run_cli("show", "goal", "--json").stdout)
    assert len(data["nodes"]) == 1 and data["status"] == "finished"
    assert data["reason"].startswith("target 0.3 reached: n001") and data["best"]["test_score"] is not None


def fast_session(tmp_path, runs_dir, tracker, name, stages):
    """A controller on a template whose stages copy the checkpoint and score in a blink."""
    template = templates.load(str(make_template(tmp_path / "tpl", train_py="copy_train.py",
                                                evaluate_py="fast_evaluate.py")))
    config = make_config(name=name, topic="t", template=str(template.path), stages=stages, runs_dir=runs_dir,
                         tracking_uri=tracker.uri, noise_probe="off")  # the proposer alone decides here
    return create_session(config, template, tracker)


def test_a_proposer_that_only_produces_dropped_proposals_stops_the_session(tmp_path, runs_dir, tracker):
    from search.proposers import ProposalDropped

    controller = fast_session(tmp_path, runs_dir, tracker, "dry", stages=3)

    class Dropping:
        name, chooses_parent = "dropping", True

        def propose(self, tree, parent):
            raise ProposalDropped("nothing new")

        def usage(self):
            return {}

    controller.parts.proposer = Dropping()
    controller.run()
    assert controller.status == "failed" and controller.budget.spent_stages == 0
    assert "5 proposals in a row were dropped, the last: nothing new" in controller.reason


def test_a_search_that_runs_dry_after_some_stages_still_scores_its_winner(tmp_path, runs_dir, tracker):
    from search.proposers import ProposalDropped

    controller = fast_session(tmp_path, runs_dir, tracker, "dry2", stages=4)
    real = controller.parts.proposer

    class DryAfterOne:
        name, chooses_parent = real.name, True

        def __getattr__(self, attribute):
            return getattr(real, attribute)

        def propose(self, tree, parent):
            if tree.nodes:
                raise ProposalDropped("nothing new to run from there")
            return real.propose(tree, parent)

    controller.parts.proposer = DryAfterOne()
    controller.run()
    assert controller.status == "finished" and controller.reason.startswith("search exhausted: 5 proposals")
    assert controller.budget.spent_stages == 1 and controller.tree.nodes["n001"].test_score is not None
