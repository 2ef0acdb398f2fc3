"""Greedy keep-or-discard on a single line (the autoresearch loop, in stages).

One incumbent: the best node kept so far (the base model at first). Each proposal
mutates one or two of the incumbent's hyperparameters and trains a stage from it; a
child that scores higher than the incumbent is kept and becomes the new incumbent,
any other is discarded. At the depth limit the incumbent's last stage is retried from
its parent instead, and kept only if it beats the incumbent.
"""

from __future__ import annotations

import random

from search.proposers.base import BaseProposer, Proposal
from search.space import SearchSpace
from search.tree import Node, Tree


class GreedyProposer(BaseProposer):
    name = "greedy"
    chooses_parent = True

    def __init__(self, space: SearchSpace, max_depth: int, seed: int = 0):
        self.space = space
        self.max_depth = max_depth
        self.seed = seed
        self.incumbent: str | None = None
        self.redraws = 0  # mutations redrawn for this stage because they repeated a sibling

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        incumbent = tree.nodes.get(self.incumbent) if self.incumbent else None
        if incumbent is None:
            start, values = None, self.space.defaults()
        else:
            start = incumbent.parent if incumbent.depth >= self.max_depth else incumbent.id
            values = incumbent.hyperparameters
        if tree.nodes:  # the very first stage runs the defaults as they are
            suffix = f":{self.redraws}" if self.redraws else ""  # the first draw is as it always was
            rng = random.Random(f"greedy:{self.seed}:{len(tree.nodes)}{suffix}")
            values = self.space.mutate(values, rng, changes=rng.randint(1, 2))
        action = "retry the last stage of" if incumbent is not None and start != incumbent.id else "extend"
        return Proposal(parent=start, hyperparameters=values,
                        rationale=f"{action} the incumbent {self.incumbent or 'base'} with a mutation")

    def withdraw_duplicate(self, proposal: Proposal, twin: Node, tree: Tree) -> None:
        self.redraws += 1

    def parents(self, tree: Tree) -> set[str]:
        """The incumbent and, once it is at the depth limit, its parent (a node stops being
        the incumbent only for a better one, and never becomes it again)."""
        incumbent = tree.nodes.get(self.incumbent) if self.incumbent else None
        return {n for n in (incumbent.id, incumbent.parent) if n} if incumbent else set()

    def restore(self, tree: Tree, session_metrics: dict[str, float]) -> None:
        """Rebuild the incumbent from a tree read back after a stop."""
        self.incumbent = None
        for node in tree.nodes.values():
            self.observe(tree, node)

    def observe(self, tree: Tree, node: Node) -> None:
        self.redraws = 0
        best = tree.score_of(self.incumbent)
        if node.scored and (best is None or node.val_score > best):
            self.incumbent = node.id
            node.kept = True
