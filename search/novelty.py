"""De-duplication: a stage that nearly repeats one already tried from the same parent
with the same train.py teaches the search nothing and is not run.

Numeric values are compared by their position in the space (on the log scale where
the parameter has one), categoricals must differ outright.
"""

from __future__ import annotations

import math
from typing import Any

from search.space import Param, SearchSpace
from search.tree import Tree

TOLERANCE = 0.05  # fraction of a parameter's range


def position(param: Param, value: float) -> float:
    """Where ``value`` lies in the parameter's range, 0..1 (log scale when the space says so)."""
    if param.log:
        return (math.log(value) - math.log(param.low)) / (math.log(param.high) - math.log(param.low))
    return (value - param.low) / (param.high - param.low)


def repeat_band(param: Param, tolerance: float = TOLERANCE) -> str:
    """The near-repeat band in the parameter's own units: what a proposer can act on."""
    if param.log:
        return f"×{math.exp(tolerance * math.log(param.high / param.low)):.2f}"
    return f"±{tolerance * (param.high - param.low):.3g}"


def near_duplicate(space: SearchSpace, a: dict[str, Any], b: dict[str, Any], tolerance: float = TOLERANCE) -> bool:
    for name, param in space.params.items():
        if name not in a or name not in b:
            return False
        if param.type == "categorical":
            if a[name] != b[name]:
                return False
        elif abs(position(param, a[name]) - position(param, b[name])) > tolerance:
            return False
    return True


def duplicate_of(tree: Tree, space: SearchSpace, parent: str | None, values: dict[str, Any],
                 commit: str | None = None, same_script: bool = False) -> str | None:
    """The id of an earlier sibling (same parent, same train.py) that ``values`` nearly repeats.
    ``commit`` names the train.py the new stage runs; ``same_script`` says it runs its parent's
    unchanged, so siblings that edited train.py are not repeats."""
    for sibling in tree.children(parent):
        if commit is not None and sibling.commit and sibling.commit != commit:
            continue
        if same_script and sibling.edited:
            continue
        if near_duplicate(space, values, sibling.hyperparameters):
            return sibling.id
    return None
