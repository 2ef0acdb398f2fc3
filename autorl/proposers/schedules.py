"""Flat baselines: whole schedules drawn up front, no tree.

A schedule is a list of stages from the base model; its stages run one after another,
each continuing from the previous one's checkpoint. Every stage is still scored, so a
schedule of three stages is also judged after one and two. A failed stage ends its
schedule. The strategies differ only in how a schedule is drawn:

- ``grid``: the space's grid points (``grid = [...]`` in space.toml), each held constant
  for ``max_depth`` stages, in an order shuffled by the seed;
- ``random``: a uniform length in 1..max_depth, every stage drawn uniformly;
- ``optuna`` (flat): TPE over the length and every stage's values, one trial per
  schedule, told the validation score of the schedule's last checkpoint.
"""

from __future__ import annotations

import random
from typing import Any

import optuna
from optuna.trial import TrialState

from autorl.proposers.base import Proposal
from autorl.space import Param, SearchSpace
from autorl.tree import Node, Tree


class ScheduleProposer:
    """Runs schedules one at a time; subclasses say how the next one is drawn."""

    name = "schedule"
    chooses_parent = True

    def __init__(self, space: SearchSpace, max_depth: int, seed: int = 0):
        self.space = space
        self.max_depth = max_depth
        self.rng = random.Random(seed)
        self.pending: list[dict[str, Any]] = []  # stages of the current schedule not yet proposed
        self.tip: str | None = None  # last node of the current schedule
        self.count = 0
        self.length = 0

    def draw(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def finished(self, tree: Tree, last: Node) -> None:
        """Hook: the current schedule ended with ``last`` (its final or its failed stage)."""

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        if not self.pending:
            self.pending, self.tip = self.draw(), None
            self.count, self.length = self.count + 1, len(self.pending)
        stage = self.length - len(self.pending) + 1
        values = self.space.check(self.pending.pop(0))
        return Proposal(parent=self.tip, hyperparameters=values, proposer=self.name,
                        rationale=f"schedule {self.count}, stage {stage} of {self.length}",
                        optuna_trial=self.trial_number())

    def trial_number(self) -> int | None:
        return None

    def observe(self, tree: Tree, node: Node) -> None:
        if node.scored and self.pending:
            self.tip = node.id
            return
        self.pending = []
        self.finished(tree, node)


class GridProposer(ScheduleProposer):
    name = "grid"

    def __init__(self, space: SearchSpace, max_depth: int, seed: int = 0):
        super().__init__(space, max_depth, seed)
        self.points = space.grid_points()
        self.rng.shuffle(self.points)

    def draw(self) -> list[dict[str, Any]]:
        point = self.points[(self.count) % len(self.points)]
        return [dict(point) for _ in range(self.max_depth)]


class RandomScheduleProposer(ScheduleProposer):
    name = "random"

    def draw(self) -> list[dict[str, Any]]:
        return [self.space.sample(self.rng) for _ in range(self.rng.randint(1, self.max_depth))]


def suggest(trial: optuna.Trial, name: str, param: Param) -> Any:
    if param.type == "categorical":
        return trial.suggest_categorical(name, param.choices)
    if param.type == "int":
        return trial.suggest_int(name, int(param.low), int(param.high), log=param.log)
    return trial.suggest_float(name, param.low, param.high, log=param.log)


class FlatTpeProposer(ScheduleProposer):
    name = "optuna-flat"

    def __init__(self, space: SearchSpace, max_depth: int, study: optuna.Study, seed: int = 0):
        super().__init__(space, max_depth, seed)
        self.study = study
        self.trial: optuna.Trial | None = None

    def draw(self) -> list[dict[str, Any]]:
        self.trial = self.study.ask()
        length = self.trial.suggest_int("stages", 1, self.max_depth)
        return [{name: suggest(self.trial, f"s{i}.{name}", param) for name, param in self.space.params.items()}
                for i in range(1, length + 1)]

    def trial_number(self) -> int | None:
        return self.trial.number if self.trial else None

    def finished(self, tree: Tree, last: Node) -> None:
        if last.scored:
            self.study.tell(self.trial, last.val_score)
        else:
            self.study.tell(self.trial, state=TrialState.FAIL)
