"""Which knobs mattered: fANOVA over a tree's gains, on hand-built trees."""

import random

from autorl.stages import template as templates
from search.importance import MIN_STAGES, gains, importance_text, param_importance
from search.tree import Node, Status, Tree

SPACE = templates.load("arith").space


def tree_where_only_the_learning_rate_matters(stages: int) -> Tree:
    rng = random.Random(1)
    tree = Tree(base_score=0.5, base_stderr=0.016)
    for i in range(stages):
        values = SPACE.sample(rng)
        gain = -0.4 if values["learning_rate"] > 3e-4 else 0.05 + rng.gauss(0, 0.005)
        tree.add(Node(f"n{i + 1:03d}", None, 1, values, seed=i, proposer="tree", status=Status.SUCCEEDED,
                      val_score=0.5 + gain, val_stderr=0.016))
    return tree


def test_the_parameter_that_decides_the_gain_comes_first():
    found = param_importance(tree_where_only_the_learning_rate_matters(14), SPACE)
    assert next(iter(found)) == "learning_rate" and found["learning_rate"] > 0.5
    assert abs(sum(found.values()) - 1) < 1e-6
    assert "learning_rate" in importance_text(found, 14) and "fANOVA over 14 stages" in importance_text(found, 14)


def test_no_estimate_from_too_few_stages_or_values_outside_the_space():
    assert param_importance(tree_where_only_the_learning_rate_matters(MIN_STAGES - 1), SPACE) is None
    tree = tree_where_only_the_learning_rate_matters(MIN_STAGES)
    for node in tree.nodes.values():
        node.hyperparameters = {**node.hyperparameters, "epsilon": 0.2, "learning_rate": 5.0}  # an older space
    assert param_importance(tree, SPACE) is None
    assert "not yet" in importance_text(None, 3)


def test_gains_within_depth_compare_a_stage_only_with_its_own_depth():
    tree = Tree(base_score=0.5, base_stderr=0.01)
    for node_id, parent, depth, score, rate in (("n001", None, 1, 0.70, 1e-4), ("n002", None, 1, 0.60, 3e-4),
                                                ("n003", "n001", 2, 0.72, 1e-4)):
        tree.add(Node(node_id, parent, depth, {"learning_rate": rate}, seed=1, proposer="tree",
                      status=Status.SUCCEEDED, val_score=score, val_stderr=0.01))
    assert [round(g, 3) for _, g in gains(tree)] == [0.2, 0.1, 0.02]
    # depth 1's mean gain is 0.15; n003 is alone at depth 2 and says nothing about its values
    assert [(v["learning_rate"], round(g, 3)) for v, g in gains(tree, within_depth=True)] == [(1e-4, 0.05),
                                                                                              (3e-4, -0.05)]
