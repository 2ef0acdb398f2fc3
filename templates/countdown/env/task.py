"""The countdown task: reach a target number with + - * / over given numbers.

FROZEN. This file belongs to the environment: the controller hashes it at session
start and refuses to score a checkpoint if it changed. train.py may import it
(prompts, training split, reward functions) but must not edit it.

A problem is a few numbers and a target that some expression over them reaches; the
policy answers with an equation in ``<answer>…</answer>``. The answer is verified, not
compared with a reference: any expression that uses only the given numbers, each at
most once, and evaluates exactly to the target is correct. Problems are generated
here, deterministically; the splits are disjoint by a hash bucket of the problem.
"""

from __future__ import annotations

import ast
import hashlib
import operator
import random
import re
from collections import Counter
from fractions import Fraction

SPLITS = ("train", "validation", "test")
_BUCKETS = {"validation": {0}, "test": {1}, "train": set(range(2, 10))}
_SEEDS = {"train": 1000, "validation": 2000, "test": 3000}
NUMBERS_PER_PROBLEM = 3
MAX_NUMBER = 25
ANSWER_PATTERN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
PROMPT = ("Using the numbers {numbers}, write an equation that equals {target}. You may use +, -, * and /, "
          "and each number at most once. Give only the expression inside <answer></answer>, "
          "for example <answer>(1 + 2) * 3</answer>.")


def problem_id(numbers: list[int], target: int) -> str:
    """The stable id of a problem: its numbers and target.

    >>> problem_id([3, 7, 12], 33)
    '3,7,12=33'
    """
    return ",".join(map(str, numbers)) + f"={target}"


def split_of(numbers: list[int], target: int) -> str:
    """The one split a problem belongs to (numbers in any order count as one problem).

    >>> split_of([12, 3, 7], 33) == split_of([3, 7, 12], 33)
    True
    """
    key = problem_id(sorted(numbers), target)
    bucket = int(hashlib.sha256(key.encode()).hexdigest(), 16) % 10
    return next(name for name, buckets in _BUCKETS.items() if bucket in buckets)


def _random_problem(rng: random.Random) -> tuple[list[int], int] | None:
    """Numbers and a positive integer target that an expression over all of them reaches."""
    numbers = [rng.randint(1, MAX_NUMBER) for _ in range(NUMBERS_PER_PROBLEM)]
    value = Fraction(numbers[0])
    for number in numbers[1:]:
        value = rng.choice([operator.add, operator.sub, operator.mul])(value, number)
    if value.denominator != 1 or not 1 <= value <= 1000:
        return None
    shuffled = numbers[:]
    rng.shuffle(shuffled)
    return shuffled, int(value)


def problems(split: str, n: int, seed_offset: int = 0) -> list[dict]:
    """``n`` distinct problems of ``split``, deterministic for a seed offset.

    Each is ``{"id", "numbers", "target", "prompt"}``; ``prompt`` is a chat (a list of
    messages), as TRL's GRPOTrainer expects, and ``numbers``/``target`` reach the reward
    functions as keyword arguments.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    rng = random.Random(_SEEDS[split] + seed_offset)
    seen: set[str] = set()
    out: list[dict] = []
    while len(out) < n:
        made = _random_problem(rng)
        if made is None or split_of(*made) != split or problem_id(*made) in seen:
            continue
        numbers, target = made
        seen.add(problem_id(numbers, target))
        out.append({"id": problem_id(numbers, target), "numbers": numbers, "target": target,
                    "prompt": [{"role": "user", "content": PROMPT.format(numbers=numbers, target=target)}]})
    return out


def _value(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Expression):
        return _value(node.body, used)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_value(node.left, used), _value(node.right, used))
    raise ValueError("only integers, + - * / and parentheses are allowed")


def evaluate_equation(text: str, numbers: list[int]) -> Fraction | None:
    """The exact value of an equation over ``numbers`` (each at most once), or None.

    >>> evaluate_equation("(3 + 7) * 12 / 4", [3, 7, 12, 4])
    Fraction(30, 1)
    >>> evaluate_equation("3 + 3", [3, 7]) is None  # 3 used twice
    True
    >>> evaluate_equation("__import__('os')", [1]) is None
    True
    """
    used: list[int] = []
    try:
        value = _value(ast.parse(text.strip(), mode="eval"), used)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None
    return value if not Counter(used) - Counter(numbers) else None


def extract_answer(text: str) -> str | None:
    found = ANSWER_PATTERN.findall(text)
    return found[-1].strip() if found else None


def _text(completion) -> str:
    """A completion's text: TRL passes chats (lists of messages) or plain strings."""
    return completion[-1]["content"] if isinstance(completion, list) else completion


def correctness_reward(completions, numbers, target, **kwargs) -> list[float]:
    """1.0 when the answer's equation uses the given numbers and equals the target.

    >>> correctness_reward(["<answer>(25 - 5) * 2</answer>", "<answer>25</answer>"], [[2, 5, 25]] * 2, [40] * 2)
    [1.0, 0.0]
    """
    rewards = []
    for completion, allowed, goal in zip(completions, numbers, target):
        answer = extract_answer(_text(completion))
        value = evaluate_equation(answer, allowed) if answer is not None else None
        rewards.append(1.0 if value is not None and value == goal else 0.0)
    return rewards


def format_reward(completions, **kwargs) -> list[float]:
    """0.25 for an answer tag around something that parses as an equation (a binary-exact
    weight, so a group with one reward has a standard deviation of exactly zero).

    >>> format_reward(["<answer>1 + 2</answer>", "three"])
    [0.25, 0.0]
    """
    rewards = []
    for completion in completions:
        answer = extract_answer(_text(completion))
        try:
            ok = answer is not None and bool(answer) and ast.parse(answer, mode="eval") is not None
        except SyntaxError:
            ok = False
        rewards.append(0.25 if ok else 0.0)
    return rewards


REWARD_FUNCS = [correctness_reward, format_reward]
