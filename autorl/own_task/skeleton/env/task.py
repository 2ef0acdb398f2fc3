"""Your task, from a data file: prompts, splits and the reward.

FROZEN. This file belongs to the environment: the controller hashes it at session start
and refuses to score a checkpoint if it changed. train.py may import it (prompts, the
training split, reward functions) but must not edit it.

`autorl init DIR --from-data FILE` wrote it with ``env/task.toml`` (which fields, which
reward, the system prompt) and the three splits in ``env/data/`` (env/prepare.py rebuilds
them from the file). One function, ``score``, judges a completion against its answer: it
is the training reward and the evaluator's metric alike, so the score that counts is the
reward's own exact metric on greedy replies.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import re
import tomllib
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPLITS = ("train", "validation", "test")
FORMAT_BONUS = 0.25  # the format reward for an answer inside the tag, when a tag is asked for
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@cache
def settings() -> dict:
    return tomllib.loads((HERE / "task.toml").read_text())


def normalise(text) -> str:
    """Case, surrounding whitespace and punctuation, and runs of spaces do not count.

    >>> normalise("  The  Answer is 42. ")
    'the answer is 42'
    """
    return " ".join(str(text).split()).casefold().strip(" .,;:!?\"'")


def last_number(text) -> float | None:
    """The last number in a text, thousands separators ignored.

    >>> last_number("3 + 4 = 1,207.5 apples")
    1207.5
    >>> last_number("none") is None
    True
    """
    found = _NUMBER.findall(str(text))
    return float(found[-1].replace(",", "")) if found else None


def answer_part(completion: str, tag: str | None) -> str | None:
    """The part of a reply that is judged: inside the last ``<tag>…</tag>`` when a tag is
    asked for (None without one), else the whole reply.

    >>> answer_part("I think <answer> 7 </answer>", "answer")
    ' 7 '
    >>> answer_part("7", "answer") is None
    True
    """
    if not tag:
        return completion
    found = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", completion, re.S)
    return found[-1] if found else None


def _same_number(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _regex_answer(pattern: str, text: str) -> str | None:
    """The last match of ``pattern``: its first group where it has one, else the whole match."""
    matches = list(re.finditer(pattern, text))
    if not matches:
        return None
    last = matches[-1]
    return last.group(1) if last.re.groups else last.group(0)


@cache
def custom_function():
    """The function ``--reward python:FILE:FUNCTION`` named, copied into env/ as custom_reward.py."""
    reward = settings()["reward"]
    spec = importlib.util.spec_from_file_location("custom_reward", HERE / "custom_reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, reward["function"])


def score(completion: str, answer: str) -> float:
    """How right one reply is, in [0, 1]: the reward the task was generated with."""
    reward = settings()["reward"]
    part = answer_part(completion, reward.get("tag"))
    if part is None:
        return 0.0
    kind = reward["kind"]
    if kind == "exact":
        return float(normalise(part) == normalise(answer))
    if kind == "last-number":
        return float(_same_number(last_number(part), last_number(answer)))
    if kind == "contains":
        return float(normalise(answer) in normalise(part))
    if kind == "regex":
        found = _regex_answer(reward["pattern"], part)
        return float(found is not None and normalise(found) == normalise(answer))
    if kind == "python":
        return as_reward(custom_function()(part, answer), reward["function"])
    raise ValueError(f"unknown reward kind {kind!r} in env/task.toml")


def as_reward(value, function: str) -> float:
    """A custom function's value as a reward: a number in [0, 1] (True and False count as 1 and 0).

    >>> as_reward(True, "f")
    1.0
    """
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{function} returned {value!r}: a reward must be a number in [0, 1]")
    return float(value)


def _text(completion) -> str:
    """A completion's text: TRL passes chats (lists of messages) or plain strings."""
    return completion[-1]["content"] if isinstance(completion, list) else completion


def correctness_reward(completions, answer, **kwargs) -> list[float]:
    """The task's score of each completion against its answer."""
    return [score(_text(c), expected) for c, expected in zip(completions, answer)]


def format_reward(completions, **kwargs) -> list[float]:
    """A small bonus for a reply that puts its answer inside the tag."""
    tag = settings()["reward"].get("tag")
    return [FORMAT_BONUS if answer_part(_text(c), tag) is not None else 0.0 for c in completions]


def reward_funcs() -> list:
    return [correctness_reward, format_reward] if settings()["reward"].get("tag") else [correctness_reward]


def rows(split: str) -> list[dict]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    with (HERE / "data" / f"{split}.jsonl").open() as handle:
        return [json.loads(line) for line in handle if line.strip()]


def chat(prompt: str):
    """The prompt as the model is asked it: chat messages when its tokenizer has a chat
    template (TRL and the evaluator apply it), else plain text."""
    system = settings().get("system", "")
    if settings().get("chat", True):
        return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return f"{system}\n\n{prompt}" if system else prompt


def problems(split: str, n: int, seed_offset: int = 0) -> list[dict]:
    """``n`` items of ``split``: ``{"id", "prompt", "answer"}``. The held-out splits come
    in their stored order; the training split is shuffled by ``seed_offset``. ``n`` beyond
    what a split holds is an error."""
    found = rows(split)
    if n > len(found):
        raise ValueError(f"the {split} split holds {len(found)} items; asked for {n}")
    if split == "train":
        random.Random(1000 + seed_offset).shuffle(found)
    return [{"id": row["id"], "prompt": chat(row["prompt"]), "answer": row["answer"]} for row in found[:n]]
