"""Stages side by side (--parallel N): they overlap, every one is recorded, and the search
handles nodes still training (no stall, no repeat, PBT and schedules wait for what they need)."""

import json
from datetime import datetime

import pytest
from conftest import make_template, run_cli

from autorl.loop.slots import StageSlots
from search.proposers import GridProposer, PbtProposer, ProposalDeferred
from search.space import Param, SearchSpace
from search.tree import Node, Status, Tree

SPACE = SearchSpace([
    Param(name="learning_rate", type="float", low=1e-6, high=1e-3, log=True, default=1e-5),
    Param(name="beta", type="float", low=0.0, high=0.1, default=0.04, grid=[0.0, 0.04]),
])


def node(id_, parent=None, status=Status.SUCCEEDED, score=0.5, proposer="pbt", **values):
    return Node(id=id_, parent=parent, depth=1, hyperparameters=values or SPACE.defaults(), seed=0,
                proposer=proposer, status=status, val_score=score if status == Status.SUCCEEDED else None,
                val_stderr=0.01)


def intervals(data: dict) -> list[tuple[datetime, datetime]]:
    return [(datetime.fromisoformat(n["started_at"]), datetime.fromisoformat(n["ended_at"])) for n in data["nodes"]]


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _, change in edges:
        running += change
        peak = max(peak, running)
    return peak


def test_pbt_waits_for_the_round_before_to_be_scored():
    pbt, tree = PbtProposer(SPACE, size=2, seed=1), Tree()
    tree.add(node("n001"))
    tree.add(node("n002", status=Status.RUNNING))
    with pytest.raises(ProposalDeferred, match="round 2 waits for round 1: n002"):
        pbt.propose(tree, None)
    tree.nodes["n002"].status, tree.nodes["n002"].val_score = Status.SUCCEEDED, 0.6
    assert pbt.propose(tree, None).parent in {"n001", "n002"}


def test_pbt_members_of_one_round_are_proposed_while_others_run():
    pbt, tree = PbtProposer(SPACE, size=4, seed=1), Tree()
    tree.add(node("n001", status=Status.RUNNING))
    assert pbt.propose(tree, None).parent is None  # member 2 of round 1 needs nothing from member 1


def test_a_schedule_waits_for_its_previous_stage():
    grid, tree = GridProposer(SPACE, max_depth=2, seed=0), Tree()
    first = grid.propose(tree, None)
    with pytest.raises(ProposalDeferred, match="waits for its stage"):
        grid.propose(tree, None)
    tree.add(node("n001", proposer="grid", **first.hyperparameters))
    grid.observe(tree, tree.nodes["n001"])
    assert grid.propose(tree, None).parent == "n001"


def test_slots_hand_back_steps_and_results_in_order():
    slots = StageSlots(2)
    slots.start("n001", lambda: (slots.post("step", "n001", {"step": 1}), "done")[1])
    first = slots.next_event(timeout=5)
    assert (first.kind, first.node_id, first.payload) == ("step", "n001", {"step": 1})
    done = slots.next_event(timeout=5)
    assert done.kind == "done" and done.payload.result() == "done" and slots.free == 2
    slots.close()


@pytest.mark.slow
def test_a_parallel_session_overlaps_its_stages_and_records_every_one(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="slow_copy_train.py", evaluate_py="fast_evaluate.py")
    done = run_cli("research", "side by side", "--template", str(template), "--stages", "6", "--parallel", "2",
                   "--name", "par", "--seed", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "up to 2 stages at once" in done.stdout
    data = json.loads(run_cli("show", "par", "--json").stdout)
    assert data["status"] == "finished" and data["stages_spent"] == 6
    assert [n["status"] for n in data["nodes"]] == ["succeeded"] * 6
    assert most_at_once(intervals(data)) == 2  # side by side, never more than asked
    (repeat,) = [n for n in data["nodes"] if n["repeat_of"]]  # the noise probe, once its original had scored
    original = next(n for n in data["nodes"] if n["id"] == repeat["repeat_of"])
    assert repeat["hyperparameters"] == original["hyperparameters"] and repeat["parent"] is original["parent"] is None
    assert original["ended_at"] <= repeat["started_at"]
    assert len({json.dumps(n["hyperparameters"], sort_keys=True) for n in data["nodes"]}) == 5
    assert all(n["mlflow_status"] == "FINISHED" for n in data["nodes"])


@pytest.mark.slow
def test_a_parallel_session_killed_mid_stage_resumes_both_running_stages(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="slow_copy_train.py", evaluate_py="fast_evaluate.py")
    killed = run_cli("research", "side by side", "--template", str(template), "--stages", "4", "--parallel", "2",
                     "--name", "par", env={"AUTORL_FAULT": "mid_training:4"})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    resumed = run_cli("resume", "par")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    data = json.loads(run_cli("show", "par", "--json").stdout)
    assert data["status"] == "finished" and data["stages_spent"] == 4
    assert [n["status"] for n in data["nodes"]] == ["succeeded"] * 4
    assert sum(n["attempt"] == 2 for n in data["nodes"]) == 2  # the two cut short were trained again, once


def test_a_stage_result_survives_the_trip_through_its_file_to_another_folder(tmp_path):
    """A node's folder is packed on a cluster node and unpacked in the controller's: the
    result names its files relative to the folder, so they resolve wherever it lands."""
    from autorl.errors import ContractError
    from autorl.stages.evaluate import EvalResult
    from autorl.stages.remote_stage import decode, encode
    from autorl.stages.stage import StageOutcome, StageWork
    from sandbox import RunResult

    there, here = tmp_path / "node" / "n003", tmp_path / "sessions" / "s" / "nodes" / "n003"
    run = RunResult(0, False, 3.5, there / "stdout.log", there / "stderr.log", {"status": "ok"}, tier="bwrap")
    outcome = StageOutcome(run, [{"step": 1}], there / "checkpoint", None, {"steps_s": 2.0})
    scored = StageWork(outcome, EvalResult("validation", 0.5, 0.01, 100, 1.0, 1.2, there / "eval_validation.json"))
    back = decode(json.loads(json.dumps(encode(scored, there))), [{"step": 1}], here)
    assert back.outcome.result.stdout_path == here / "stdout.log" and back.outcome.checkpoint == here / "checkpoint"
    assert back.evaluation.path == here / "eval_validation.json" and back.evaluation.mean == 0.5
    assert back.outcome.timing == {"steps_s": 2.0} and back.outcome.result.tier == "bwrap"
    refused = decode(json.loads(json.dumps(encode(StageWork(outcome, refusal=ContractError("no output")), there))),
                     [], here)
    assert isinstance(refused.refusal, ContractError) and str(refused.refusal) == "no output"


def test_a_worker_plan_moves_to_the_node_that_runs_the_stage():
    from autorl.stages.remote_stage import relocate

    plan = {"visible": ["/srv/runs/sessions/s/workspace"], "hidden_roots": ["/srv/runs/sessions/s/nodes"],
            "preload": [{"paths": ["/srv/runs/sessions/s/workspace/env"], "modules": ["torch"]}],
            "home": "/srv/runs/sessions/s/worker", "other": "/srv/runs/sessions/sx"}
    moved = relocate(plan, {"/srv/runs/sessions/s/workspace": "/scratch/w", "/srv/runs/sessions/s": "/scratch/job"})
    assert moved["visible"] == ["/scratch/w"] and moved["hidden_roots"] == ["/scratch/job/nodes"]
    assert moved["preload"][0] == {"paths": ["/scratch/w/env"], "modules": ["torch"]}
    assert moved["other"] == "/srv/runs/sessions/sx"  # a sibling folder with a longer name is not under it


def test_trials_side_by_side_get_their_share_of_the_cpus(tmp_path):
    from autorl.config import make_config
    from autorl.errors import ConfigError
    from autorl.session import trial_cpus
    from sandbox import Limits, Sandbox

    base = dict(name="s", topic="t", runs_dir=tmp_path, tracking_uri="sqlite:///x.db")
    assert trial_cpus(make_config(**base)) is None  # one at a time: all of them
    assert trial_cpus(make_config(**base, parallel=2, trial_cpus=3)) == 3
    assert trial_cpus(make_config(**base, parallel=64)) == 1
    env = Sandbox(Limits(cpus=2)).trial_env({}, None)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "2"
    with pytest.raises(ConfigError, match="--ray-address needs --executor ray"):
        make_config(**base, ray_address="http://head:8265")


def test_a_template_says_how_many_cpus_a_trial_wants(tmp_path):
    from autorl.config import make_config
    from autorl.errors import TemplateError
    from autorl.session import trial_cpus
    from autorl.stages import template as templates

    folder = make_template(tmp_path / "tpl")
    constants = folder / "env" / "constants.toml"
    constants.chmod(0o644)
    constants.write_text(constants.read_text().replace("wall_seconds = 300", "wall_seconds = 300\ncpus = 3"))
    config = make_config(name="s", topic="t", runs_dir=tmp_path, tracking_uri="sqlite:///x.db", parallel=2)
    assert trial_cpus(config, templates.load(str(folder))) == 3
    assert trial_cpus(config.model_copy(update={"trial_cpus": 1.0}), templates.load(str(folder))) == 1
    constants.write_text(constants.read_text().replace("cpus = 3", "cpus = -1"))
    with pytest.raises(TemplateError, match=r"\[stage\] cpus = -1 is not a positive number"):
        templates.load(str(folder))
