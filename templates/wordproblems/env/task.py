"""Word problems: one addition or subtraction told as a short story.

FROZEN. This file belongs to the environment: the controller hashes it at session
start and refuses to score a checkpoint if it changed. train.py may import it
(prompts, training split, reward functions) but must not edit it.

A problem is "{name} has {a} {things} and gets {b} more" (a + b) or "… gives away {b}"
(a - b), asked in one chat message that wants a one-sentence answer. The answer that
counts is the last integer of the reply, compared exactly with the result. The splits
are disjoint by the arithmetic, not by the wording: a hash bucket of (operation, a, b)
decides the split, so no sum or difference the evaluator asks was trained on under
another name.
"""

from __future__ import annotations

import hashlib
import random
import re

SPLITS = ("train", "validation", "test")
_BUCKETS = {"validation": {0}, "test": {1}, "train": set(range(2, 10))}
_SEEDS = {"train": 1000, "validation": 2000, "test": 3000}
LOW, HIGH = 2, 60
NAMES = ("Tom", "Anna", "Ben", "Lucy", "Sam", "Mia", "Jack", "Emma", "Leo", "Zoe", "Max", "Lily")
THINGS = ("apples", "books", "coins", "marbles", "stickers", "pencils", "cookies", "cards", "stamps", "shells")
STORIES = {
    "add": "{name} has {a} {things} and gets {b} more. How many {things} does {name} have now?",
    "sub": "{name} has {a} {things} and gives away {b}. How many {things} does {name} have now?",
}
INSTRUCTION = " Answer in one short sentence."
_INTEGER = re.compile(r"-?\d+")


def problem_id(operation: str, a: int, b: int) -> str:
    """The arithmetic of a problem, which decides its split.

    >>> problem_id("add", 3, 12)
    'add:3:12'
    """
    return f"{operation}:{a}:{b}"


def split_of(operation: str, a: int, b: int) -> str:
    """The one split this arithmetic belongs to, whatever the story's names.

    >>> split_of("sub", 20, 8) in SPLITS
    True
    """
    bucket = int(hashlib.sha256(problem_id(operation, a, b).encode()).hexdigest(), 16) % 10
    return next(name for name, buckets in _BUCKETS.items() if bucket in buckets)


def _random_problem(rng: random.Random) -> dict:
    operation = rng.choice(sorted(STORIES))
    a, b = rng.randint(LOW, HIGH), rng.randint(LOW, HIGH)
    if operation == "sub":
        a, b = max(a, b) + 1, min(a, b)  # a positive difference
    answer = a + b if operation == "add" else a - b
    text = STORIES[operation].format(name=rng.choice(NAMES), things=rng.choice(THINGS), a=a, b=b) + INSTRUCTION
    return {"id": problem_id(operation, a, b), "operation": operation, "a": a, "b": b, "answer": answer,
            "prompt": [{"role": "user", "content": text}]}


def problems(split: str, n: int, seed_offset: int = 0) -> list[dict]:
    """``n`` distinct problems of ``split``, deterministic for a seed offset.

    Each is ``{"id", "operation", "a", "b", "answer", "prompt"}``; ``prompt`` is a chat
    (a list of messages), as TRL's GRPOTrainer expects, and ``answer`` reaches the reward
    function as a keyword argument. No two share their arithmetic, so a held-out score
    counts ``n`` independent sums; validation and test hold about 520 each, and ``n``
    beyond what a split holds is an error.

    >>> [p["id"] for p in problems("test", 3)] == [p["id"] for p in problems("test", 3)]
    True
    >>> all(split_of(p["operation"], p["a"], p["b"]) == "validation" for p in problems("validation", 50))
    True
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    available = len(arithmetic_of(split))
    if n > available:
        raise ValueError(f"the {split} split holds {available} distinct problems; asked for {n}")
    rng = random.Random(_SEEDS[split] + seed_offset)
    seen: set[str] = set()
    out: list[dict] = []
    while len(out) < n:
        problem = _random_problem(rng)
        if problem["id"] not in seen and split_of(problem["operation"], problem["a"], problem["b"]) == split:
            seen.add(problem["id"])
            out.append(problem)
    return out


def arithmetic_of(split: str) -> list[str]:
    """Every (operation, a, b) the stories can ask, restricted to ``split``."""
    pairs = [("add", a, b) for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)]
    pairs += [("sub", a, b) for a in range(LOW + 1, HIGH + 2) for b in range(LOW, min(a, HIGH + 1))]
    return [problem_id(*p) for p in pairs if split_of(*p) == split]


def final_integer(text: str) -> int | None:
    """The last integer in a reply: the number a one-sentence answer ends on.

    >>> final_integer("Tom has 12 + 5 = 17 apples.")
    17
    >>> final_integer("I cannot tell.") is None
    True
    """
    found = _INTEGER.findall(text)
    return int(found[-1]) if found else None


def _text(completion) -> str:
    """A completion's text: TRL passes chats (lists of messages) or plain strings."""
    return completion[-1]["content"] if isinstance(completion, list) else completion


def correctness_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 when the reply's last integer is the result.

    >>> correctness_reward(["Mia has 16 + 8 = 24 pencils.", "Mia has 16 pencils."], [24, 24])
    [1.0, 0.0]
    """
    return [1.0 if final_integer(_text(c)) == expected else 0.0 for c, expected in zip(completions, answer)]


REWARD_FUNCS = [correctness_reward]
