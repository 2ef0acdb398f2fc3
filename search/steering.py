"""Diagnosis steers the search without an LLM: each finding on a parent points some
hyperparameters of its child up or down from the parent's values.

The rules are the textbook responses to each GRPO pathology (they are also what the
findings' suggestions say in words). A direction becomes a narrowed range: "up" keeps
the part of the space above the parent's value, "down" the part below. Optuna's TPE
then samples inside the narrowed ranges, so the diagnosis picks the direction and TPE
picks the distance, within one step (a quarter of the range) of the parent's value.
Categorical parameters move one choice in the direction.
"""

from __future__ import annotations

import math
from typing import Any

from search.space import Param, SearchSpace
from search.tree import Finding

# finding name -> {parameter role (search.space.ROLES): "up" | "down"}; every finding a
# detector can raise has a rule, so a critical one always moves something.
RULES: dict[str, dict[str, str]] = {
    "entropy_collapse": {"temperature": "up", "learning_rate": "down"},
    "zero_variance_groups": {"group_size": "up", "temperature": "up"},
    "kl_blowup": {"learning_rate": "down", "kl_coefficient": "up"},
    "length_truncation": {"completion_length": "up"},
    "length_explosion": {"completion_length": "down"},
    "grad_norm_spikes": {"learning_rate": "down"},
    "grad_clipping": {},  # information for reading comparisons, not a fault to steer away from
    "non_finite": {"learning_rate": "down"},
    "reward_collapse": {"learning_rate": "down"},
    "reward_plateau": {"learning_rate": "up", "steps": "up"},
    "train_eval_divergence": {"learning_rate": "down", "kl_coefficient": "up"},
    "regression": {"learning_rate": "down"},
}


def directions(findings: list[Finding], space: SearchSpace | None = None) -> dict[str, str]:
    """Parameter directions from a node's findings; the most severe finding wins a conflict.
    Keys are roles, or the space's parameter names for them when ``space`` is given.

    >>> directions([Finding("kl_blowup", "warning"), Finding("reward_plateau", "info")])
    {'learning_rate': 'down', 'kl_coefficient': 'up', 'steps': 'up'}
    """
    steer: dict[str, str] = {}
    for finding in findings:  # findings come most severe first
        for role, direction in RULES.get(finding.name, {}).items():
            name = space.named(role) if space is not None else role
            if name is not None:
                steer.setdefault(name, direction)
    return steer


STEP = 0.25  # how far one steered stage may move: this share of the parameter's (log) range


def narrowed_range(param: Param, value: Any, direction: str, step: float = STEP) -> tuple[float, float] | None:
    """The numeric range one step to ``direction``'s side of ``value`` (None if empty).

    One step, not the rest of the space: a plateau says "a bit higher", not "anything up
    to the bound" — the bound is where stages collapse.
    """
    if param.log:
        factor = math.exp(step * math.log(param.high / param.low))
        low, high = (value, value * factor) if direction == "up" else (value / factor, value)
    else:
        span = step * (param.high - param.low)
        low, high = (value, value + span) if direction == "up" else (value - span, value)
    low, high = max(low, param.low), min(high, param.high)
    return (low, high) if low < high else None


def next_choice(param: Param, value: Any, direction: str) -> Any | None:
    """The neighbouring categorical choice in ``direction`` (choices are listed in order)."""
    if value not in param.choices:
        return None
    index = param.choices.index(value) + (1 if direction == "up" else -1)
    return param.choices[index] if 0 <= index < len(param.choices) else None


def steered_space(space: SearchSpace, parent_values: dict[str, Any], findings: list[Finding], step: float = STEP
                  ) -> tuple[dict[str, tuple[float, float]], dict[str, Any], dict[str, str]]:
    """Numeric ranges and fixed categorical values for a child of a diagnosed parent.

    Returns (ranges, fixed, applied) where ``applied`` names the directions that could
    be followed (a parameter already at its bound cannot move further).
    """
    ranges: dict[str, tuple[float, float]] = {}
    fixed: dict[str, Any] = {}
    applied: dict[str, str] = {}
    for name, direction in directions(findings, space).items():
        param = space.params.get(name)
        if param is None or name not in parent_values:
            continue
        if param.type == "categorical":
            choice = next_choice(param, parent_values[name], direction)
            if choice is not None:
                fixed[name], applied[name] = choice, direction
        elif (bounds := narrowed_range(param, parent_values[name], direction, step)) is not None:
            ranges[name], applied[name] = bounds, direction
    return ranges, fixed, applied


def neighbourhood(param: Param, value: Any, step: float = STEP) -> tuple[float, float] | None:
    """The range within one step of ``value`` on both sides (None if empty)."""
    down, up = narrowed_range(param, value, "down", step), narrowed_range(param, value, "up", step)
    low, high = (down[0] if down else value), (up[1] if up else value)
    return (low, high) if low < high else None


def local_ranges(space: SearchSpace, parent_values: dict[str, Any], ranges: dict[str, tuple[float, float]],
                 step: float = STEP) -> dict[str, tuple[float, float]]:
    """``ranges`` with every float parameter not already steered kept within one step of
    the parent's value.

    A child stage continues its parent's training: good schedules move their values
    between stages, they do not start over (a learning rate 30× the parent's is how a
    strong checkpoint collapses). The first stage still samples the whole space.
    """
    local = dict(ranges)
    for name, param in space.params.items():
        value = parent_values.get(name)
        if name in local or param.type != "float" or not isinstance(value, (int, float)):
            continue
        if (bounds := neighbourhood(param, value, step)) is not None:
            local[name] = bounds
    return local
