"""Noise-aware comparison of two checkpoints scored on the same items.

A paired comparison (per-item differences) is much tighter than comparing two means
with their own errors, because both checkpoints see the same problems. A child beats
its parent only when the mean difference exceeds ``Z`` standard errors; otherwise it
is a tie.
"""

from __future__ import annotations

import math

from search.tree import Comparison

Z = 2.0


def paired_comparison(child: list[dict], parent: list[dict], z: float = Z) -> Comparison | None:
    """Compare per-item ``correct`` values on the items both were scored on, paired by
    the ``id`` the evaluator writes for each item (the template contract).

    >>> same = [{"id": str(i), "correct": i % 2} for i in range(100)]
    >>> paired_comparison(same, same).verdict
    'tie'
    """
    parent_by_id = {item["id"]: item for item in parent}
    diffs = [float(item["correct"]) - float(parent_by_id[item["id"]]["correct"])
             for item in child if item["id"] in parent_by_id]
    n = len(diffs)
    if n < 2:
        return None
    mean = sum(diffs) / n
    variance = sum((d - mean) ** 2 for d in diffs) / (n - 1)
    stderr = math.sqrt(variance / n)
    if stderr == 0:
        verdict = "tie" if mean == 0 else ("better" if mean > 0 else "worse")
    else:
        verdict = "better" if mean > z * stderr else "worse" if mean < -z * stderr else "tie"
    return Comparison(mean, stderr, n, verdict)
