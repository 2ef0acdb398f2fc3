"""Tree policy and proposers, on hand-built trees (no training needed)."""

import optuna
import pytest

from autorl import hpo
from autorl import template as templates
from autorl.policy import BestFirstPolicy
from autorl.proposers import RandomProposer, TpeProposer
from autorl.tree import Node, Status, Tree


def scored(tree, node_id, parent, score, depth=1):
    node = Node(node_id, parent, depth, {}, seed=0, proposer="test", status=Status.SUCCEEDED, val_score=score, val_stderr=0.01)
    return tree.add(node)


def sample_tree():
    tree = Tree(base_score=0.5, base_stderr=0.01)
    scored(tree, "n001", None, 0.6)
    scored(tree, "n002", "n001", 0.7, depth=2)
    scored(tree, "n003", None, 0.55)
    return tree


def test_policy_prefers_high_scores_and_respects_depth():
    tree = sample_tree()
    assert BestFirstPolicy(max_depth=3, exploration=0.0).select(tree) == "n002"
    assert BestFirstPolicy(max_depth=2, exploration=0.0).select(tree) == "n001"
    assert BestFirstPolicy(max_depth=1, exploration=0.0).select(tree) is None  # only new first stages
    assert "n002" not in BestFirstPolicy(max_depth=2).candidates(tree)


def test_policy_is_deterministic_for_a_seed():
    tree = sample_tree()
    picks = [[BestFirstPolicy(3, exploration=1.0, seed=s).select(tree) for _ in range(5)] for s in (1, 1)]
    assert picks[0] == picks[1]


def test_exploration_bonus_favours_unvisited_nodes():
    tree = sample_tree()
    for i in range(6):  # many failed children of n002
        tree.add(Node(f"f{i}", "n002", 3, {}, seed=0, proposer="t", status=Status.FAILED))
    assert BestFirstPolicy(max_depth=3, exploration=0.2).select(tree) != "n002"


def test_diagnosis_keeps_the_policy_off_unhealthy_nodes():
    tree = sample_tree()
    tree.nodes["n002"].extra["diagnosis"] = [{"name": "reward_collapse", "severity": "critical"}]
    assert BestFirstPolicy(max_depth=3, exploration=0.0).select(tree) == "n001"
    tree.nodes["n001"].extra["comparison"] = {"verdict": "worse"}
    assert BestFirstPolicy(max_depth=3, exploration=0.0).select(tree) == "n003"


def test_tree_paths_and_best():
    tree = sample_tree()
    assert [n.id for n in tree.path("n002")] == ["n001", "n002"]
    assert tree.best().id == "n002"
    with pytest.raises(ValueError, match="unknown parent"):
        tree.add(Node("x", "nope", 1, {}, seed=0, proposer="t"))


def test_random_proposer_starts_from_defaults_then_samples():
    space = templates.load("arith").space
    proposer = RandomProposer(space, seed=3)
    tree = Tree(base_score=0.5)
    assert proposer.propose(tree, None).hyperparameters == space.defaults()
    scored(tree, "n001", None, 0.6)
    assert space.check(proposer.propose(tree, "n001").hyperparameters)


def test_tpe_tells_gain_over_parent_and_survives_reopen(tmp_path):
    space = templates.load("arith").space
    study = hpo.open_study(tmp_path, "s", seed=0)
    proposer = TpeProposer(space, study)
    tree = Tree(base_score=0.5, base_stderr=0.01)
    proposal = proposer.propose(tree, None)
    assert proposal.hyperparameters == space.defaults()  # the enqueued reference
    node = scored(tree, "n001", None, 0.62)
    node.extra["optuna_trial"] = proposal.optuna_trial
    proposer.observe(tree, node)
    failed = Node("n002", "n001", 2, {}, seed=0, proposer="optuna", status=Status.FAILED)
    failed.extra["optuna_trial"] = proposer.propose(tree, "n001").optuna_trial
    tree.add(failed)
    proposer.observe(tree, failed)

    reopened = hpo.open_study(tmp_path, "s", seed=0)
    states = [t.state for t in reopened.trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]
    assert reopened.trials[0].value == pytest.approx(0.12)
    assert reopened.trials[1].user_attrs == {"parent": "n001", "depth": 2}
