"""The frozen arith task: disjoint, deterministic splits and plain reward functions."""

import importlib.util

import pytest

from autorl import template as templates


@pytest.fixture(scope="module")
def task():
    path = templates.load("arith").env_dir / "task.py"
    spec = importlib.util.spec_from_file_location("arith_task", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def keys(problems):
    return {(p["a"], p["b"]) for p in problems}


def test_splits_are_disjoint(task):
    train, val, test = (keys(task.problems(s, 1000)) for s in ("train", "validation", "test"))
    assert len(train) == len(val) == len(test) == 1000
    assert not train & val and not train & test and not val & test


def test_splits_are_deterministic(task):
    assert task.problems("validation", 50) == task.problems("validation", 50)
    assert task.problems("train", 50, seed_offset=1) != task.problems("train", 50, seed_offset=2)


def test_rewards_accept_chat_completions(task):
    completions = [[{"role": "assistant", "content": "<answer>579</answer>"}], [{"role": "assistant", "content": "57"}]]
    assert task.correctness_reward(completions, answer=["579", "579"]) == [1.0, 0.0]
    assert task.format_reward(completions) == [0.25, 0.0]


def test_unknown_split_is_an_error(task):
    with pytest.raises(ValueError, match="unknown split"):
        task.problems("dev", 1)
