"""The budget is training compute: a stage costs the GRPO steps it trained, a proposal
larger than what is left is shortened to fit, and the session ends when none fits."""

import json

import pytest
from conftest import make_template, run_cli

from autorl.config import DEFAULT_TRAIN_STEPS, make_config
from autorl.loop.budget import Budget
from autorl.stages import template as templates

ARITH = templates.load("arith")


def test_a_stage_reserves_what_it_plans_and_is_charged_what_it_trained():
    budget = Budget(max_train_steps=60, min_stage_steps=10)
    budget.charge_stage("n001", 40)
    assert budget.train_steps_left == 20 and budget.exhausted() is None
    budget.settle("n001", 13)  # crashed after 13 steps
    assert budget.spent_train_steps == 13 and budget.train_steps_left == 47
    budget.charge_stage("n002", 40)
    budget.settle("n002", 40)
    assert budget.train_steps_left == 7 and "training-step budget spent (53 of 60 steps trained;" in budget.exhausted()
    assert budget.describe().startswith("53 of 60 GRPO training steps spent (7 left), 2 stages")


def test_what_running_stages_reserved_is_told_apart_from_what_was_trained():
    """The controller waits for running stages before it stops (autorl/loop/controller.py:
    stop_reason); the reason then names steps trained, and never counts a reservation as such."""
    budget = Budget(max_train_steps=60, min_stage_steps=10)
    budget.charge_stage("n001", 20)
    budget.settle("n001", 12)
    budget.charge_stage("n002", 40)
    assert budget.settled_train_steps == 12 and budget.train_steps_left == 8
    assert budget.exhausted() == ("training-step budget spent (12 of 60 steps trained, 40 reserved by running "
                                  "stages; the smallest stage takes 10)")
    budget.settle("n002", 30)
    assert budget.exhausted() is None and budget.settled_train_steps == budget.spent_train_steps == 42


def test_the_stage_cap_and_the_step_budget_both_hold():
    budget = Budget(max_stages=2, max_train_steps=1000)
    budget.charge_stage("n001", 10)
    budget.charge_stage("n002", 10)
    assert budget.exhausted() == "stage budget spent (2/2)"
    assert Budget(max_stages=8, max_train_steps=100).stages_left(20) == (5, 5)


def test_a_long_proposal_is_shortened_to_the_longest_stage_that_fits():
    values = {**ARITH.space.defaults(), "max_steps": 40}
    assert ARITH.fit_steps(values, 100) == values
    assert ARITH.fit_steps(values, 25)["max_steps"] == 20
    assert ARITH.fit_steps(values, 9) is None  # the shortest stage is 10 steps
    assert ARITH.stage_step_choices() == [10, 20, 40]


def test_a_session_without_a_budget_gets_the_default_step_budget(tmp_path):
    config = make_config(name="s", topic="t", runs_dir=tmp_path, tracking_uri="x")
    assert (config.train_steps, config.stages) == (DEFAULT_TRAIN_STEPS, None) and config.max_depth == 3
    capped = make_config(name="s", topic="t", stages=24, runs_dir=tmp_path, tracking_uri="x")
    assert capped.train_steps is None and capped.max_depth == 6


@pytest.mark.slow
def test_a_session_trains_at_most_its_step_budget(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="steps_train.py", evaluate_py="fast_evaluate.py",
                             space={"max_steps": "[40, 10, 20]"})
    done = run_cli("research", "t", "--template", str(template), "--train-steps", "60", "--stages", "20",
                   "--name", "steps")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(run_cli("show", "steps", "--json").stdout)
    trained = sum(n["steps"] for n in data["nodes"])
    assert data["train_steps_spent"] == trained and 60 - 40 <= trained <= 60
    assert data["nodes"][0]["steps"] == 40 and "training-step budget spent" in data["reason"]
    assert all(n["steps"] == n["hyperparameters"]["max_steps"] for n in data["nodes"])
    by_id = {n["id"]: n for n in data["nodes"]}
    assert data["best"]["path_steps"] == sum(by_id[i]["steps"] for i in data["best"]["path"])
    assert f"its path trained {data['best']['path_steps']} of the {trained} GRPO steps spent" in done.stdout


def test_the_proposer_is_told_how_the_session_ends():
    """A proposal that uses up the steps gets no successor and its result is never shown: the
    LLM reads that in its budget line (autorl/session.py hands it ``for_proposer``)."""
    budget = Budget(max_train_steps=60, min_stage_steps=10)
    budget.charge_stage("n001", 40)
    budget.settle("n001", 40)
    text = budget.for_proposer()
    assert text.startswith("40 of 60 GRPO training steps spent (20 left)")
    assert "ends when fewer than 10 steps are left" in text and "scored once on the test split" in text
    assert text.endswith("A stage of more than 10 steps leaves fewer than 10 and is the last; one of 10 or fewer "
                         "leaves room for another whose result you will see.")
    nearly = Budget(max_train_steps=60, min_stage_steps=10, spent_train_steps=45)  # any stage leaves < 10
    assert nearly.for_proposer().endswith("This proposal is the last stage of the session: its result will not be "
                                          "shown to you, so spend it where you expect the best validation score, "
                                          "not on a control.")
    assert Budget(max_stages=3).for_proposer() == Budget(max_stages=3).describe()
    roomy = Budget(max_train_steps=160, min_stage_steps=10)
    assert "A stage of more than 150 steps leaves fewer than 10 and is the last" in roomy.for_proposer()
    two_of_three = Budget(max_stages=3, spent_stages=2)
    assert "This proposal is the last stage" in two_of_three.for_proposer()


def test_the_budget_line_names_the_stage_lengths_the_space_allows():
    """With 40 steps left and stages of 10, 20 or 40, "more than 30 is the last" names a length no
    stage has: the line says which of the allowed lengths leave room."""
    choices = {"min_stage_steps": 10, "step_choices": (10, 20, 40)}
    forty_left = Budget(max_train_steps=160, spent_train_steps=120, **choices).for_proposer()
    assert forty_left.endswith("Of the stage lengths the space allows, 10 or 20 steps leave room for another stage "
                               "whose result you will see; 40 steps is the last.")
    assert "more than 30" not in forty_left
    twenty_five_left = Budget(max_train_steps=160, spent_train_steps=135, **choices).for_proposer()
    assert twenty_five_left.endswith("10 steps leaves room for another stage whose result you will see; 20 steps is "
                                     "the last.")
    assert "Of the stage lengths" not in Budget(max_train_steps=160, **choices).for_proposer()  # every one leaves room
