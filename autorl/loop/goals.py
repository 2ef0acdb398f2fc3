"""Goals that end a session before its budget: a target score, or patience run out.

``--target SCORE`` stops the session once a node's validation score reaches it (the
winner is then scored on test as at any end); ``--patience N`` stops it after N stages
in a row brought no gain beyond noise over the best score so far. A topic that states a
target ("past 65% accuracy") suggests one, which the user confirms.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from search.seed_noise import Noise
from search.tree import Tree

NOISE_UNITS = 2.0  # a gain counts when it beats the best by this many standard errors of the difference
PERCENT = re.compile(r"(\d{1,3}(?:\.\d+)?)\s*(?:%|percent\b)")


@dataclass(frozen=True)
class Goals:
    target: float | None = None
    patience: int | None = None
    noise: Noise = field(default_factory=Noise)  # the seed-to-seed spread of a stage: part of "beyond noise"

    def met(self, tree: Tree) -> str | None:
        """Why the session may stop now, or None."""
        best = tree.best()
        if self.target is not None and best is not None and best.val_score >= self.target:
            return f"target {self.target:g} reached: {best.id} scored {best.val_score:.3f} on validation"
        if self.patience is not None and stages_without_gain(tree, self.noise.sd(tree) or 0.0) >= self.patience:
            return f"no gain beyond noise in the last {self.patience} stages (--patience {self.patience})"
        return None

    def distance(self, tree: Tree) -> float | None:
        """How far the best validation score is below the target (None without one)."""
        best = tree.best()
        if self.target is None:
            return None
        return self.target - (best.val_score if best is not None else tree.base_score or 0.0)


def stages_without_gain(tree: Tree, stage_sd: float = 0.0) -> int:
    """Stages since the last one that beat the best score so far beyond noise: both scores'
    evaluation errors and, with ``stage_sd``, training randomness (the base model's score
    is the first best)."""
    best, best_stderr, since = tree.base_score, tree.base_stderr or 0.0, 0
    for node in tree.nodes.values():
        if node.scored and (best is None or node.val_score - best >
                            NOISE_UNITS * math.hypot(best_stderr, node.val_stderr or 0.0, stage_sd)):
            best, best_stderr, since = node.val_score, node.val_stderr or 0.0, 0
        else:
            since += 1
    return since


def target_in_topic(topic: str) -> float | None:
    """A target a topic states as a percentage ("past 65% accuracy" -> 0.65), if one.

    >>> target_in_topic("get 3-digit addition past 65% accuracy")
    0.65
    >>> target_in_topic("keep entropy up") is None
    True
    """
    match = PERCENT.search(topic)
    if match is None or not 0 < float(match.group(1)) <= 100:
        return None
    return float(match.group(1)) / 100
