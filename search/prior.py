"""The schedule prior LLMZero reports: capacity grows, regularisation moves.

Across the stages of good GRPO schedules, capacity parameters (completion length,
group size, steps) tend to grow monotonically, while regularisation parameters
(learning rate, KL coefficient, temperature) go up and down with the training
dynamics. With the prior on, a child stage keeps or raises each capacity parameter
of its parent: numeric ones are sampled at or above the parent's value, categorical
ones are lifted to the parent's choice when sampled below it (choices are listed in
order). Diagnosis steering wins over the prior: a stage told to shorten its
completions (length explosion) may.
"""

from __future__ import annotations

from typing import Any

from search.space import SearchSpace

CAPACITY_ROLES = ("completion_length", "group_size", "steps")


def capacity_params(space: SearchSpace) -> list[str]:
    return [name for role in CAPACITY_ROLES if (name := space.named(role)) is not None]


def grown_ranges(space: SearchSpace, parent_values: dict[str, Any], ranges: dict[str, tuple[float, float]],
                 steered: set[str]) -> dict[str, tuple[float, float]]:
    """``ranges`` with each numeric capacity parameter kept at or above the parent's value."""
    grown = dict(ranges)
    for name in capacity_params(space):
        param, value = space.params[name], parent_values.get(name)
        if name in steered or param.type == "categorical" or not isinstance(value, (int, float)):
            continue
        low, high = grown.get(name, (param.low, param.high))
        if max(low, value) < high:
            grown[name] = (max(low, value), high)
    return grown


def lifted(space: SearchSpace, parent_values: dict[str, Any], values: dict[str, Any],
           steered: set[str]) -> tuple[dict[str, Any], list[str]]:
    """``values`` with each categorical capacity choice lifted to the parent's when below it."""
    values, moved = dict(values), []
    for name in capacity_params(space):
        param, parent = space.params[name], parent_values.get(name)
        if name in steered or param.type != "categorical" or parent not in param.choices:
            continue
        if param.choices.index(values[name]) < param.choices.index(parent):
            moved.append(f"{name} {values[name]}→{parent}")
            values[name] = parent
    return values, moved
