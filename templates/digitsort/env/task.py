"""The digitsort task: sort six digits, in chat format.

FROZEN. This file belongs to the environment: the controller hashes it at session
start and refuses to score a checkpoint if it changed. train.py may import it
(prompts, training split, reward functions) but must not edit it.

A prompt is ``sort 583920``; the answer is ``<answer>023589</answer>``. Unlike arith's
all-or-nothing reward, the reward here gives partial credit per digit in place, so
groups rarely tie and the learning signal is dense.

Splits are disjoint by construction: every digit string falls in exactly one bucket of
a hash, and each split samples only from its own bucket with its own seed.
"""

from __future__ import annotations

import hashlib
import random
import re

SPLITS = ("train", "validation", "test")
LENGTH = 6
_BUCKETS = {"validation": {0}, "test": {1}, "train": set(range(2, 10))}
_SEEDS = {"train": 1100, "validation": 2100, "test": 3100}

ANSWER_PATTERN = re.compile(r"<answer>(\d+)</answer>")


def split_of(digits: str) -> str:
    """Return the one split that ``digits`` belongs to.

    >>> split_of("583920") in SPLITS
    True
    """
    bucket = int(hashlib.sha256(digits.encode()).hexdigest(), 16) % 10
    return next(name for name, buckets in _BUCKETS.items() if bucket in buckets)


def problems(split: str, n: int, seed_offset: int = 0) -> list[dict]:
    """Return ``n`` distinct problems of ``split``, deterministic for a seed offset.

    Each problem is ``{"digits", "answer", "prompt"}`` where ``prompt`` is a chat
    (list of messages) as TRL's GRPOTrainer expects.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    rng = random.Random(_SEEDS[split] + seed_offset)
    seen: set[str] = set()
    out: list[dict] = []
    while len(out) < n:
        digits = "".join(rng.choice("0123456789") for _ in range(LENGTH))
        if digits in seen or split_of(digits) != split:
            continue
        seen.add(digits)
        out.append(make_problem(digits))
    return out


def make_problem(digits: str) -> dict:
    return {"digits": digits, "answer": "".join(sorted(digits)),
            "prompt": [{"role": "user", "content": f"sort {digits}"}]}


def target_text(answer: str) -> str:
    """The completion a perfect policy writes."""
    return f"<answer>{answer}</answer>"


def completion_text(completion) -> str:
    """Text of a completion, whether TRL passes a string or a list of chat messages."""
    if isinstance(completion, list):
        return completion[-1]["content"] if completion else ""
    return completion


def extract_answer(text: str) -> str | None:
    """The digits inside the first ``<answer>`` tag, or None.

    >>> extract_answer("<answer>023589</answer>")
    '023589'
    """
    match = ANSWER_PATTERN.search(text)
    return match.group(1) if match else None


def correctness_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 for the exact sorted string, else half a point times the share of digits in place.

    >>> correctness_reward(["<answer>023589</answer>", "<answer>023598</answer>", "x"], answer=["023589"] * 3)
    [1.0, 0.333333, 0.0]
    """
    rewards = []
    for completion, target in zip(completions, answer):
        predicted = extract_answer(completion_text(completion)) or ""
        if predicted == target:
            rewards.append(1.0)
            continue
        in_place = sum(p == t for p, t in zip(predicted, target)) if len(predicted) == len(target) else 0
        rewards.append(round(0.5 * in_place / len(target), 6))
    return rewards


def format_reward(completions, **kwargs) -> list[float]:
    """0.25 for a well-formed ``<answer>digits</answer>`` and nothing else.

    >>> format_reward(["<answer>012</answer>", "012"])
    [0.25, 0.0]
    """
    return [0.25 if ANSWER_PATTERN.fullmatch(completion_text(c).strip()) else 0.0 for c in completions]


REWARD_FUNCS = [correctness_reward, format_reward]
