"""Advice that fits the space: a finding's suggestion names only moves the stage can make.

The detectors (diagnose.py) read curves and suggest the textbook move: larger groups for
constant groups, a longer completion budget for truncation. A move is no advice when the
stage already sat at the edge of the space ("larger groups" with ``num_generations`` at
its largest choice), and a completion budget means little without the evaluator's own
token cap beside it. This module rewrites the suggestion with what the stage ran with and
what the space allows. Parameters are found by role (search/space.py), never by name.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from search.space import SearchSpace
from search.tree import Finding


def at_largest(space: SearchSpace, values: dict[str, Any], role: str) -> tuple[str, Any] | None:
    """(name, value) when the parameter playing ``role`` ran at the top of its range or choices."""
    name = space.named(role)
    if name is None or name not in values:
        return None
    param, value = space.params[name], values[name]
    if param.type == "categorical":
        top = _largest_choice(param.choices)
        return (name, value) if top is not None and value == top else None
    return (name, value) if param.high is not None and value >= param.high else None


def _largest_choice(choices: list[Any]) -> Any:
    numbers = [c for c in choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    return max(numbers) if numbers and len(numbers) == len(choices) else None


def fit_to_space(findings: list[Finding], space: SearchSpace | None, values: dict[str, Any],
                 eval_token_cap: int | None = None) -> list[Finding]:
    """``findings`` with each suggestion told which of its moves the space has left."""
    if space is None:
        return findings
    return [_fitted(f, space, values, eval_token_cap) for f in findings]


def _fitted(finding: Finding, space: SearchSpace, values: dict[str, Any], cap: int | None) -> Finding:
    if finding.name == "zero_variance_groups":
        return _blocked(finding, space, values, ["group_size", "temperature"],
                        "a new stage from another node, or a learning rate that moves the policy off its "
                        "all-or-nothing answers")
    if finding.name == "entropy_collapse":
        return _blocked(finding, space, values, ["temperature"], "lower the learning rate")
    if finding.name == "kl_blowup":
        return _blocked(finding, space, values, ["kl_coefficient"], "lower the learning rate")
    if finding.name == "length_truncation":
        return _truncation(finding, space, values, cap)
    return finding


def _blocked(finding: Finding, space: SearchSpace, values: dict[str, Any], roles: list[str], otherwise: str
             ) -> Finding:
    """Say which suggested parameters are already at their largest; when all are, suggest ``otherwise``."""
    stuck = dict(hit for role in roles if (hit := at_largest(space, values, role)))
    if not stuck:
        return finding
    said = ", ".join(f"{name} is already at its largest ({value})" for name, value in stuck.items())
    movable = [name for role in roles if (name := space.named(role)) and name not in stuck]
    advice = f"raise {', '.join(movable)}" if movable else otherwise
    return replace(finding, suggestion=f"{said}: {advice}")


def _truncation(finding: Finding, space: SearchSpace, values: dict[str, Any], cap: int | None) -> Finding:
    evaluator = (f"; the evaluator generates at most {cap} tokens ([eval] max_new_tokens), so an answer longer "
                 "than that scores nothing however long training lets it be") if cap else ""
    stuck = at_largest(space, values, "completion_length")
    if stuck:
        name, value = stuck
        return replace(finding, suggestion=f"{name} is already at its largest ({value}){evaluator}: a lower "
                                           "temperature")
    return replace(finding, suggestion=finding.suggestion + evaluator) if evaluator else finding
