"""Tree policy: which node to extend with the next stage.

UCT-style best-first: every expandable node (the base model, and each scored node
shallower than the depth limit) gets its validation score plus an exploration bonus
that shrinks as it gains children. Failed children count as visits, so a node whose
stages keep crashing is tried less. Ties are broken by a seeded RNG, so a search is
reproducible for a seed.

Diagnosis steers it: a node that is worse than its parent beyond noise, or whose
stage shows a critical pathology (reward collapse, non-finite values, no gradient,
reward hacking), is not extended while any other candidate exists.
"""

from __future__ import annotations

import math
import random

from autorl.tree import Node, Tree


def healthy(node: Node) -> bool:
    """False when diagnosis says the node should not be extended."""
    comparison = node.extra.get("comparison") or {}
    critical = any(f.get("severity") == "critical" for f in node.extra.get("diagnosis", []))
    return comparison.get("verdict") != "worse" and not critical


class BestFirstPolicy:
    def __init__(self, max_depth: int, exploration: float = 0.05, seed: int = 0):
        self.max_depth = max_depth
        self.exploration = exploration  # in score units: 0.05 = five accuracy points
        self.rng = random.Random(seed)

    def candidates(self, tree: Tree) -> list[str | None]:
        """The base model (None) and every scored, healthy node that may get another stage."""
        return [None] + [n.id for n in tree.scored() if n.depth < self.max_depth and healthy(n)]

    def value(self, tree: Tree, node_id: str | None) -> float:
        visits = len(tree.children(node_id))
        total = len(tree.nodes)
        bonus = self.exploration * math.sqrt(math.log(total + 1) / (visits + 1))
        return (tree.score_of(node_id) or 0.0) + bonus

    def select(self, tree: Tree) -> str | None:
        candidates = self.candidates(tree)
        values = {c: self.value(tree, c) for c in candidates}
        top = max(values.values())
        best = [c for c in candidates if math.isclose(values[c], top, abs_tol=1e-12)]
        return self.rng.choice(best)
