"""Uniform random search over the space (a baseline)."""

from __future__ import annotations

import random

from autorl.proposers.base import Proposal
from autorl.space import SearchSpace
from autorl.tree import Node, Tree


class RandomProposer:
    """Draws every value independently; the first stage runs the space's defaults."""

    name = "random"

    def __init__(self, space: SearchSpace, seed: int = 0):
        self.space = space
        self.rng = random.Random(seed)

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        values = self.space.defaults() if not tree.nodes else self.space.sample(self.rng)
        return Proposal(parent=parent, hyperparameters=values, rationale="random draw")

    def observe(self, tree: Tree, node: Node) -> None:
        pass
