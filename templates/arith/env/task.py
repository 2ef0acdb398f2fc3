"""The arith task: 3-digit addition in chat format.

FROZEN. This file belongs to the environment: the controller hashes it at session
start and refuses to score a checkpoint if it changed. train.py may import it
(prompts, training split, reward functions) but must not edit it.

Splits are disjoint by construction: every problem ``a + b`` falls in exactly one
bucket of a hash, and each split samples only from its own bucket with its own seed.
"""

from __future__ import annotations

import hashlib
import random
import re

SPLITS = ("train", "validation", "test")
# Bucket of hash(a, b) mod 10 that each split draws from.
_BUCKETS = {"validation": {0}, "test": {1}, "train": set(range(2, 10))}
_SEEDS = {"train": 1000, "validation": 2000, "test": 3000}

ANSWER_PATTERN = re.compile(r"<answer>(\d+)</answer>")


def split_of(a: int, b: int) -> str:
    """Return the one split that problem ``a + b`` belongs to.

    >>> split_of(123, 456) in SPLITS
    True
    """
    bucket = int(hashlib.sha256(f"{a}+{b}".encode()).hexdigest(), 16) % 10
    return next(name for name, buckets in _BUCKETS.items() if bucket in buckets)


def problems(split: str, n: int, seed_offset: int = 0) -> list[dict]:
    """Return ``n`` distinct problems of ``split``, deterministic for a seed offset.

    Each problem is ``{"a", "b", "answer", "prompt"}`` where ``prompt`` is a chat
    (list of messages) as TRL's GRPOTrainer expects.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    rng = random.Random(_SEEDS[split] + seed_offset)
    seen: set[tuple[int, int]] = set()
    out: list[dict] = []
    while len(out) < n:
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        if (a, b) in seen or split_of(a, b) != split:
            continue
        seen.add((a, b))
        out.append(make_problem(a, b))
    return out


def make_problem(a: int, b: int) -> dict:
    return {"a": a, "b": b, "answer": str(a + b), "prompt": [{"role": "user", "content": f"{a}+{b}"}]}


def target_text(answer: str) -> str:
    """The completion a perfect policy writes."""
    return f"<answer>{answer}</answer>"


def completion_text(completion) -> str:
    """Text of a completion, whether TRL passes a string or a list of chat messages."""
    if isinstance(completion, list):
        return completion[-1]["content"] if completion else ""
    return completion


def extract_answer(text: str) -> str | None:
    """The answer inside the first ``<answer>`` tag, or None.

    >>> extract_answer("<answer>579</answer>")
    '579'
    >>> extract_answer("579") is None
    True
    """
    match = ANSWER_PATTERN.search(text)
    return match.group(1) if match else None


def correctness_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 when the tagged answer is exactly right, else 0.0.

    >>> correctness_reward(["<answer>579</answer>", "<answer>578</answer>"], answer=["579", "579"])
    [1.0, 0.0]
    """
    return [1.0 if extract_answer(completion_text(c)) == a else 0.0 for c, a in zip(completions, answer)]


def format_reward(completions, **kwargs) -> list[float]:
    """0.25 for a well-formed ``<answer>digits</answer>`` and nothing else.

    The weight is binary-exact so a constant group has a standard deviation of exactly 0.

    >>> format_reward(["<answer>12</answer>", "12"])
    [0.25, 0.0]
    """
    return [0.25 if ANSWER_PATTERN.fullmatch(completion_text(c).strip()) else 0.0 for c in completions]


REWARD_FUNCS = [correctness_reward, format_reward]
