"""Diagnosis steering Optuna's values, and de-duplication of near-identical stages."""

import optuna
import pytest

from autorl.stages import template as templates
from search import study as hpo
from search.novelty import duplicate_of, near_duplicate
from search.proposers import TpeProposer
from search.steering import steered_space
from search.tree import Finding, Node, Status, Tree

SPACE = templates.load("arith").space


def parent_tree(findings, **values):
    tree = Tree(base_score=0.5, base_stderr=0.016)
    node = Node("n001", None, 1, SPACE.defaults() | values, seed=0, proposer="t", commit="c1",
                status=Status.SUCCEEDED, val_score=0.6, val_stderr=0.016)
    node.diagnosis = [Finding(name, "warning") for name in findings]
    tree.add(node)
    return tree


def test_findings_become_directions_on_the_parents_values():
    ranges, fixed, applied = steered_space(SPACE, SPACE.defaults(), [Finding("entropy_collapse", "warning"),
                                                                     Finding("zero_variance_groups", "warning")])
    # one step (a quarter of the range, of the log range for the learning rate) from the parent's value
    assert ranges["temperature"] == (1.0, 1.25) and ranges["learning_rate"] == pytest.approx((5e-5 / 100 ** 0.25, 5e-5))
    assert fixed == {"num_generations": 16}
    assert applied == {"temperature": "up", "learning_rate": "down", "num_generations": "up"}


def test_a_parameter_at_its_bound_is_not_steered():
    _, fixed, applied = steered_space(SPACE, SPACE.defaults() | {"num_generations": 16},
                                      [Finding("zero_variance_groups", "warning")])
    assert "num_generations" not in fixed and "num_generations" not in applied


def test_tpe_samples_inside_the_steered_ranges(tmp_path):
    tree = parent_tree(["entropy_collapse", "length_truncation"], temperature=0.8, learning_rate=2e-4)
    proposer = TpeProposer(SPACE, hpo.open_study(tmp_path, "s", 0), start_with_defaults=False)
    for _ in range(6):
        values = proposer.propose(tree, "n001").hyperparameters
        assert values["temperature"] >= 0.8 and values["learning_rate"] <= 2e-4
        assert values["max_completion_length"] == 16
    assert "steered by n001's diagnosis" in proposer.propose(tree, "n001").rationale
    healthy = parent_tree([], temperature=0.8)
    temps = [TpeProposer(SPACE, hpo.open_study(tmp_path, f"h{i}", i), start_with_defaults=False, seed=i)
             .propose(healthy, "n001").hyperparameters["temperature"] for i in range(8)]
    assert min(temps) < 0.8  # without findings the whole range is open


def test_with_local_steps_a_child_moves_its_parents_values_by_at_most_one_step(tmp_path):
    tree = parent_tree([], learning_rate=5e-5, temperature=1.0)
    factor = 100 ** 0.25  # a quarter of the learning rate's log range (1e-5..1e-3)
    children = [TpeProposer(SPACE, hpo.open_study(tmp_path, f"c{i}", i), start_with_defaults=False, seed=i, local=True)
                .propose(tree, "n001").hyperparameters for i in range(10)]  # --local-steps
    assert all(5e-5 / factor <= c["learning_rate"] <= 5e-5 * factor for c in children)
    assert all(0.75 <= c["temperature"] <= 1.25 for c in children)
    roots = [TpeProposer(SPACE, hpo.open_study(tmp_path, f"r{i}", i), start_with_defaults=False, seed=i, local=True)
             .propose(tree, None).hyperparameters["learning_rate"] for i in range(10)]
    free = [TpeProposer(SPACE, hpo.open_study(tmp_path, f"f{i}", i), start_with_defaults=False, seed=i)
            .propose(tree, "n001").hyperparameters["learning_rate"] for i in range(10)]  # the default
    for far in (roots, free):
        assert not all(5e-5 / factor <= lr <= 5e-5 * factor for lr in far)


def test_near_duplicates_are_detected_by_position_in_the_space():
    a = SPACE.defaults()
    assert near_duplicate(SPACE, a, a | {"learning_rate": 5.5e-5, "temperature": 1.02})
    assert not near_duplicate(SPACE, a, a | {"learning_rate": 1e-4})
    assert not near_duplicate(SPACE, a, a | {"loss_type": "grpo"})


def test_tpe_resamples_a_repeat_of_an_earlier_sibling(tmp_path):
    tree = parent_tree([])
    tree.add(Node("n002", "n001", 2, SPACE.defaults(), seed=0, proposer="t", commit="c1", status=Status.FAILED))
    assert duplicate_of(tree, SPACE, "n001", SPACE.defaults(), "c1") == "n002"
    assert duplicate_of(tree, SPACE, "n001", SPACE.defaults(), "other-commit") is None
    study = hpo.open_study(tmp_path, "s", 0)
    proposer = TpeProposer(SPACE, study)  # its first ask is the enqueued defaults: a repeat of n002
    proposal = proposer.propose(tree, "n001")
    assert proposal.hyperparameters != SPACE.defaults()
    assert "resampled a near-duplicate of n002" in proposal.rationale
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    assert study.trials[0].user_attrs["duplicate_of"] == "n002"


def test_steering_follows_roles_not_names():
    from search.space import Param, SearchSpace

    space = SearchSpace([Param(name="peak_lr", type="float", low=1e-6, high=1e-3, log=True, default=1e-5,
                               role="learning_rate"),
                         Param(name="sampling_temp", type="float", low=0.5, high=1.5, default=1.0, role="temperature")])
    ranges, _, applied = steered_space(space, space.defaults(), [Finding("entropy_collapse", "warning")])
    assert applied == {"sampling_temp": "up", "peak_lr": "down"}
    assert ranges["peak_lr"] == pytest.approx((1e-5 / 1000 ** 0.25, 1e-5)) and ranges["sampling_temp"] == (1.0, 1.25)


def test_every_finding_a_detector_raises_has_a_steering_rule():
    import re
    from pathlib import Path

    from search.steering import RULES

    source = (Path(__file__).parents[1] / "autorl" / "analysis" / "diagnose.py").read_text()
    raised = set(re.findall(r'Finding\("([a-z_]+)"', source))
    assert raised and raised <= set(RULES), raised - set(RULES)


def test_schedule_prior_grows_capacity_and_leaves_regularisation_free(tmp_path):
    tree = parent_tree([], max_completion_length=12, num_generations=8, learning_rate=2e-4, temperature=1.0)
    seen = []
    for i in range(8):
        proposer = TpeProposer(SPACE, hpo.open_study(tmp_path, f"p{i}", i), start_with_defaults=False, seed=i,
                               schedule_prior=True)
        seen.append(proposer.propose(tree, "n001").hyperparameters)
    assert all(v["max_completion_length"] >= 12 and v["num_generations"] >= 8 for v in seen)
    assert min(v["learning_rate"] for v in seen) < 2e-4 < max(v["learning_rate"] for v in seen)
    assert min(v["temperature"] for v in seen) < 1.0 < max(v["temperature"] for v in seen)
    # a first stage from the base model is not constrained by any parent
    free = [TpeProposer(SPACE, hpo.open_study(tmp_path, f"b{i}", i), start_with_defaults=False, seed=i,
                        schedule_prior=True).propose(tree, None).hyperparameters for i in range(8)]
    assert min(v["max_completion_length"] for v in free) < 12


def test_diagnosis_steering_wins_over_the_schedule_prior(tmp_path):
    tree = parent_tree(["length_explosion"], max_completion_length=12)
    proposer = TpeProposer(SPACE, hpo.open_study(tmp_path, "s", 0), start_with_defaults=False, schedule_prior=True)
    assert proposer.propose(tree, "n001").hyperparameters["max_completion_length"] == 8


def test_steering_step_switched_off_opens_the_range_to_the_bound():
    findings = [Finding("entropy_collapse", "warning")]
    one_step, _, _ = steered_space(SPACE, SPACE.defaults(), findings)
    to_bound, _, _ = steered_space(SPACE, SPACE.defaults(), findings, step=1.0)
    assert one_step["temperature"] == (1.0, 1.25) and to_bound["temperature"] == (1.0, 1.5)


def test_a_proposal_sent_back_by_a_check_is_not_drawn_again(tmp_path):
    tree = parent_tree([])
    proposer = TpeProposer(SPACE, hpo.open_study(tmp_path, "r", 0), start_with_defaults=False)
    first = proposer.propose(tree, "n001")
    proposer.withdraw_duplicate(first, tree.nodes["n001"], tree)  # the guard found it repeats a sibling
    assert proposer.propose(tree, "n001").hyperparameters != first.hyperparameters
