"""What the session has learnt to avoid: the learning rates at which a stage collapsed.

A collapse — validation falling far below the stage's parent, or a stage whose rewards
collapsed or went non-finite — is the strongest evidence a session gets, and in GRPO it
comes from too large a step far more often than from anything else. One is enough: no
later stage anywhere in the tree is proposed at or above ``MARGIN`` times the smallest
learning rate that collapsed — leaving out collapses whose limit would leave almost
nothing of the space below it (they were not about the step size, and forbidding the
space would stop the search; a larger step that collapsed still sets the limit). TPE
samples below the limit; an LLM proposal above it goes back to the LLM with the
evidence; any other proposer is asked again.
"""

from __future__ import annotations

from dataclasses import dataclass

from search.novelty import position
from search.space import SearchSpace
from search.tree import Node, Tree

MARGIN = 0.7  # the limit sits this far below the smallest learning rate that collapsed
ROOM = 0.1  # a limit that leaves less than this share of the (log) range below it is not evidence about the step size
RELATIVE_DROP = 0.25  # a collapse loses at least this share of the parent's score …
NOISE_UNITS = 4.0  # … and at least this many standard errors of the child's score
COLLAPSE_FINDINGS = {"reward_collapse", "non_finite"}


@dataclass(frozen=True)
class Limit:
    """No stage at or above ``value`` of parameter ``name``; ``evidence`` says why."""

    name: str
    value: float
    evidence: str

    def breached_by(self, values: dict) -> bool:
        return isinstance(values.get(self.name), (int, float)) and values[self.name] >= self.value


def collapsed(tree: Tree, node: Node) -> bool:
    if any(f.name in COLLAPSE_FINDINGS and f.severity == "critical" for f in node.diagnosis):
        return True
    parent = tree.score_of(node.parent)
    if not node.scored or parent is None or parent <= 0:
        return False
    drop = parent - node.val_score
    return drop > RELATIVE_DROP * parent and drop > NOISE_UNITS * (node.val_stderr or 0.0)


def learning_rate_limit(tree: Tree, space: SearchSpace) -> Limit | None:
    """The limit the collapses so far set on the learning-rate parameter, if any."""
    name = space.named("learning_rate")
    if name is None:
        return None
    param = space.params[name]
    culprits = [n for n in tree.nodes.values() if isinstance(n.hyperparameters.get(name), (int, float))
                and collapsed(tree, n)
                # a collapse at the smallest steps the space allows: the step size is not what to avoid
                and position(param, max(n.hyperparameters[name] * MARGIN, param.low)) >= ROOM]
    if not culprits:
        return None
    worst = min(culprits, key=lambda n: n.hyperparameters[name])
    parent = tree.score_of(worst.parent)
    outcome = (f"validation fell from {parent:.3f} to {worst.val_score:.3f}" if worst.scored and parent is not None
               else ", ".join(f.name for f in worst.diagnosis if f.name in COLLAPSE_FINDINGS) or worst.status.value)
    value = worst.hyperparameters[name] * MARGIN
    return Limit(name, value, f"{worst.id} collapsed at {name}={worst.hyperparameters[name]:.3g} ({outcome}); "
                              f"stay below {value:.3g}")
