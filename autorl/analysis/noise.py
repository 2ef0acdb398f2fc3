"""Noise-aware comparison of two checkpoints scored on the same items.

A paired comparison (per-item differences) is much tighter than comparing two means
with their own errors, because both checkpoints see the same problems. But it measures
only the evaluation's noise: the same stage trained with another seed lands elsewhere,
by ``stage_sd`` (the template's measured seed-to-seed spread). A child beats its parent
only when the mean difference exceeds ``Z`` times both noises combined; otherwise it is
a tie.
"""

from __future__ import annotations

import math

from search.tree import VERDICT_Z as Z
from search.tree import Comparison, verdict_at, verdict_margin


def paired_comparison(child: list[dict], parent: list[dict], z: float = Z, stage_sd: float = 0.0) -> Comparison | None:
    """Compare per-item ``correct`` values on the items both were scored on, paired by
    the ``id`` the evaluator writes for each item (the template contract).

    >>> same = [{"id": str(i), "correct": i % 2} for i in range(100)]
    >>> paired_comparison(same, same).verdict
    'tie'
    >>> better = [{"id": str(i), "correct": int(i % 2 or i < 10)} for i in range(100)]
    >>> paired_comparison(better, same).verdict, paired_comparison(better, same, stage_sd=0.05).verdict
    ('better', 'tie')
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
    return Comparison(mean, stderr, n, verdict_at(mean, verdict_margin(stderr, stage_sd, z)), stage_sd)
