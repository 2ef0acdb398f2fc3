"""Noise-aware comparison of two checkpoints scored on the same items.

A paired comparison (per-item differences) is much tighter than comparing two means
with their own errors, because both checkpoints see the same problems. A child beats
its parent only when the mean difference exceeds ``Z`` standard errors; otherwise it
is a tie.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

Z = 2.0


@dataclass(frozen=True)
class Comparison:
    delta: float
    stderr: float
    n: int
    verdict: str  # "better" | "worse" | "tie"

    def to_dict(self) -> dict:
        return asdict(self)


def item_key(item: dict, index: int):
    return (item["a"], item["b"]) if "a" in item and "b" in item else index


def paired_comparison(child: list[dict], parent: list[dict], z: float = Z) -> Comparison | None:
    """Compare per-item ``correct`` values on the items both were scored on.

    >>> same = [{"correct": 1}, {"correct": 0}] * 50
    >>> paired_comparison(same, same).verdict
    'tie'
    """
    parent_by_key = {item_key(item, i): item for i, item in enumerate(parent)}
    diffs = [float(item["correct"]) - float(parent_by_key[key]["correct"])
             for i, item in enumerate(child) if (key := item_key(item, i)) in parent_by_key]
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
