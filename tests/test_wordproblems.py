"""The wordproblems template's frozen parts on their own: splits disjoint by their arithmetic,
the last-integer reward, the evaluator's score, and a step's completions in micro-batches."""

import importlib.util
import tomllib

import pytest

from autorl.stages import template as templates

TEMPLATE = templates.load("wordproblems", require_model=False)
ENV = TEMPLATE.env_dir


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


task = load_module("wordproblems_task", ENV / "task.py")


def test_splits_are_disjoint_by_their_arithmetic_and_hold_distinct_problems():
    arithmetic = {split: {(p["operation"], p["a"], p["b"]) for p in task.problems(split, 500)} for split in task.SPLITS}
    assert all(len(found) == 500 for found in arithmetic.values())  # no sum asked twice within a split
    assert not arithmetic["train"] & arithmetic["validation"] and not arithmetic["train"] & arithmetic["test"]
    assert not arithmetic["validation"] & arithmetic["test"]
    assert [p["prompt"] for p in task.problems("test", 20)] == [p["prompt"] for p in task.problems("test", 20)]


def test_every_answer_is_the_arithmetic_the_story_tells():
    for problem in task.problems("validation", 200):
        text, a, b = problem["prompt"][0]["content"], problem["a"], problem["b"]
        assert f" {a} " in text and f" {b}" in text and text.endswith(task.INSTRUCTION)
        assert problem["answer"] == (a + b if "gets" in text else a - b) and problem["answer"] > 0


def test_the_evaluator_cannot_be_asked_for_more_problems_than_a_split_holds():
    held = len(task.arithmetic_of("test"))
    assert len(task.problems("test", held)) == held
    with pytest.raises(ValueError, match=f"holds {held} distinct problems"):
        task.problems("test", held + 1)
    constants = tomllib.loads((ENV / "constants.toml").read_text())["eval"]
    assert constants["test_size"] <= held and constants["validation_size"] <= len(task.arithmetic_of("validation"))


def test_the_reward_reads_the_last_integer_of_chats_and_strings():
    replies = ["Tom has 12 + 5 = 17 apples.", "17 apples, since 12 + 5.", "Seventeen.",
               [{"role": "assistant", "content": "He has 17."}]]
    assert task.correctness_reward(replies, [17] * 4) == [1.0, 0.0, 0.0, 1.0]


def test_the_evaluator_scores_replies_with_their_standard_error(monkeypatch):
    import sys

    for name in ("env", "env.task"):  # another template's env package may be imported already
        monkeypatch.delitem(sys.modules, name, raising=False)
    evaluator = load_module("wordproblems_evaluate", ENV / "evaluate.py")
    problems = task.problems("validation", 4)
    texts = [f"So {p['answer']}." for p in problems[:3]] + ["No idea."]
    scored = evaluator.score(texts, problems)
    assert scored["mean"] == 0.75 and scored["format_rate"] == 0.75 and scored["n"] == 4
    assert scored["stderr"] == pytest.approx((0.75 * 0.25 / 3) ** 0.5)
    assert [item["correct"] for item in scored["items"]] == [1, 1, 1, 0]


def test_a_step_is_trained_in_micro_batches_that_add_up_to_it():
    train = load_module("wordproblems_train", TEMPLATE.path / "train.py")
    constants = tomllib.loads((ENV / "constants.toml").read_text())
    spec = {"output_dir": "/tmp/unused", "max_steps": 5, "seed": 1, "hyperparameters": TEMPLATE.space.defaults()}
    config = train.build_config(spec, constants, train.hardware())
    assert config.per_device_train_batch_size == constants["stage"]["micro_batch"]
    assert (config.per_device_train_batch_size * config.gradient_accumulation_steps
            == constants["stage"]["completions_per_step"])
    small = {**constants, "stage": {**constants["stage"], "completions_per_step": 4}}  # a cut-down test template
    config = train.build_config(spec, small, train.hardware())
    assert config.per_device_train_batch_size == 4 and config.gradient_accumulation_steps == 1


def test_the_task_doctests():
    import doctest

    result = doctest.testmod(task)
    assert result.attempted > 0 and result.failed == 0
