"""The countdown template's frozen parts on their own: splits, verified rewards, the engine choice."""

import importlib.util

import pytest

from autorl.stages import template as templates

ENV = templates.load("countdown", require_model=False).env_dir


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(name: str):
    """A countdown env module under its own name (arith has an ``env`` package too)."""
    return load_module(f"countdown_{name}", ENV / f"{name}.py")


task = load("task")


def test_splits_are_disjoint_and_deterministic():
    ids = {split: {p["id"] for p in task.problems(split, 300)} for split in task.SPLITS}
    assert (not ids["train"] & ids["validation"] and not ids["train"] & ids["test"]
            and not ids["validation"] & ids["test"])
    assert [p["id"] for p in task.problems("validation", 50)] == [p["id"] for p in task.problems("validation", 50)]


def test_every_problem_is_solvable_and_its_answer_is_verified():
    for problem in task.problems("validation", 200):
        assert 1 <= problem["target"] <= 1000 and len(problem["numbers"]) == 3
    numbers, target = [4, 9, 13], 49
    answers = ["<answer>4 * 9 + 13</answer>", "<answer>13 * 4 - 4 + 1</answer>", "<answer>4 * 9</answer>"]
    assert task.correctness_reward(answers, [numbers] * 3, [target] * 3) == [1.0, 0.0, 0.0]  # right, reuses 4, short
    assert task.evaluate_equation("(13 - 9) * 4 + 9", numbers) is None  # 9 used twice


def test_rewards_accept_chat_completions():
    chat = [[{"role": "assistant", "content": "<answer>2 * 3</answer>"}]]
    assert task.correctness_reward(chat, [[2, 3, 5]], [6]) == [1.0] and task.format_reward(chat) == [0.25]


def test_the_evaluator_chooses_hugging_face_generate_without_cuda():
    evaluator = load("evaluate")
    assert evaluator.choose_engine("auto") == "hf" and evaluator.choose_engine("hf") == "hf"
    with pytest.raises(SystemExit, match="needs CUDA and the vllm package"):
        evaluator.choose_engine("vllm")


def test_train_py_uses_the_cpu_it_is_given():
    """On this machine: fp32, no gradient checkpointing, Hugging Face generate (the CUDA branch
    of build_config needs a GPU to construct: transformers refuses bf16 without one)."""
    import tomllib

    train = load_module("countdown_train", ENV.parent / "train.py")
    constants = tomllib.loads((ENV / "constants.toml").read_text())
    hyperparameters = templates.load("countdown", require_model=False).space.defaults()
    spec = {"output_dir": "/tmp/unused", "max_steps": 5, "seed": 1, "hyperparameters": hyperparameters}
    assert train.hardware() == {"device": "cpu", "bf16": False, "vllm": False}
    config = train.build_config(spec, constants, train.hardware())
    assert config.use_cpu and not config.bf16 and not config.use_vllm and not config.gradient_checkpointing
    per_step = config.per_device_train_batch_size * config.gradient_accumulation_steps
    assert per_step == constants["stage"]["completions_per_step"]  # micro-batches add up to a step
    assert config.per_device_train_batch_size == constants["stage"]["micro_batch"] < per_step
    assert train.lora_config(0) is None


def test_the_task_doctests():
    import doctest

    result = doctest.testmod(task)  # run here: pytest cannot collect two files named task.py
    assert result.attempted > 0 and result.failed == 0
