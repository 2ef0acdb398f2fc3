"""The built-in CPU tasks (arith, digitsort): disjoint, deterministic splits and plain
reward functions, each template keeping the whole contract."""

import doctest
import importlib.util

import pytest

from autorl.stages import template as templates

CPU_TEMPLATES = ("arith", "digitsort")


def load_task(name: str):
    path = templates.load(name).env_dir / "task.py"
    spec = importlib.util.spec_from_file_location(f"{name}_task", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=CPU_TEMPLATES)
def task(request):
    return load_task(request.param)


def keys(problems):
    return {p["prompt"][0]["content"] for p in problems}


def test_splits_are_disjoint(task):
    train, val, test = (keys(task.problems(s, 1000)) for s in ("train", "validation", "test"))
    assert len(train) == len(val) == len(test) == 1000
    assert not train & val and not train & test and not val & test


def test_splits_are_deterministic(task):
    assert task.problems("validation", 50) == task.problems("validation", 50)
    assert task.problems("train", 50, seed_offset=1) != task.problems("train", 50, seed_offset=2)


def test_rewards_accept_chat_completions(task):
    answer = task.problems("validation", 1)[0]["answer"]
    completions = [[{"role": "assistant", "content": task.target_text(answer)}],
                   [{"role": "assistant", "content": "5"}]]
    assert task.correctness_reward(completions, answer=[answer, answer]) == [1.0, 0.0]
    assert task.format_reward(completions) == [0.25, 0.0]


def test_the_examples_in_the_task_hold(task):
    result = doctest.testmod(task)
    assert result.attempted > 0 and result.failed == 0


def test_unknown_split_is_an_error(task):
    with pytest.raises(ValueError, match="unknown split"):
        task.problems("dev", 1)


def test_digitsort_gives_partial_credit_where_arith_gives_none():
    digitsort = load_task("digitsort")
    rewards = digitsort.correctness_reward(["<answer>012399</answer>", "<answer>999999</answer>"],
                                           answer=["012345"] * 2)
    assert rewards == [round(0.5 * 4 / 6, 6), 0.0]
