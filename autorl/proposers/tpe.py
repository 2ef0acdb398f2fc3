"""Optuna TPE over stage hyperparameters, through ask/tell.

The value told for a stage is its *gain over the parent* (validation score minus the
parent's), not its raw score: a second stage from a strong checkpoint and a first
stage from the base model are then judged on the same footing. The stage depth and
parent are stored as trial attributes. Only the controller talks to the study.
"""

from __future__ import annotations

import optuna

from autorl.hpo import record_node
from autorl.proposers.base import Proposal
from autorl.space import SearchSpace
from autorl.tree import Node, Tree


class TpeProposer:
    name = "optuna"

    def __init__(self, space: SearchSpace, study: optuna.Study, start_with_defaults: bool = True):
        self.space = space
        self.study = study
        if start_with_defaults and not study.trials:
            study.enqueue_trial(space.defaults())  # a known-good reference first

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        trial = self.study.ask(self.space.distributions())
        trial.set_user_attr("parent", parent or "base")
        trial.set_user_attr("depth", 1 if parent is None else tree.nodes[parent].depth + 1)
        values = self.space.check(trial.params)
        return Proposal(parent=parent, hyperparameters=values, rationale="TPE sample", optuna_trial=trial.number)

    def observe(self, tree: Tree, node: Node) -> None:
        record_node(self.study, self.space, tree, node)
