"""Flat baselines: whole schedules drawn up front, no tree.

A schedule is a list of stages from the base model; its stages run one after another,
each continuing from the previous one's checkpoint. Every stage is still scored, so a
schedule of three stages is also judged after one and two. A failed stage ends its
schedule. Its stages run one at a time, also with ``--parallel`` (each needs the
checkpoint of the one before). The strategies differ only in how a schedule is drawn:

- ``grid``: the space's grid points (``grid = [...]`` in space.toml), each held constant
  for ``max_depth`` stages, in an order shuffled by the seed; a budget larger than the
  grid refines it (midpoints between neighbouring values), as a person would;
- ``random``: a uniform length in 1..max_depth, every stage drawn uniformly;
- ``optuna`` (flat): TPE over the length and every stage's values, one trial per
  schedule, told the validation score of the schedule's last checkpoint;
- ``defaults``: no search, the control every search has to beat. The space's default
  stage, again and again down one path until the budget is spent: what a person gets by
  training the default values for the whole budget and keeping the best checkpoint.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import Any

import optuna
from optuna.trial import TrialState

from search.proposers.base import BaseProposer, Proposal, ProposalDeferred
from search.space import Param, SearchSpace
from search.study import fail_trial, reseed
from search.tree import Node, Tree


class ScheduleProposer(BaseProposer, ABC):
    """Runs schedules one at a time; subclasses say how the ``index``-th one is drawn.

    Each draw depends only on the seed and the schedule's index, so a resumed session
    rebuilds the schedule in progress from the tree (``restore``) and carries on.
    """

    name = "schedule"
    chooses_parent = True

    def __init__(self, space: SearchSpace, max_depth: int, seed: int = 0):
        self.space = space
        self.max_depth = max_depth
        self.seed = seed
        self.pending: list[dict[str, Any]] = []  # stages of the current schedule not yet proposed
        self.tip: str | None = None  # last node of the current schedule
        self.count = 0  # schedules started
        self.length = 0
        self.awaiting = False  # a stage proposed and not yet observed (or withdrawn)

    @abstractmethod
    def draw(self, index: int) -> list[dict[str, Any]]:
        """The stages of the ``index``-th schedule (1-based)."""

    def schedule_of(self, index: int) -> list[dict[str, Any]] | None:
        """The ``index``-th schedule as it was drawn, or None when it is already over."""
        return self.draw(index)

    def rng(self, index: int) -> random.Random:
        return random.Random(f"{self.name}:{self.seed}:{index}")

    def finished(self, tree: Tree, last: Node) -> None:
        """Hook: the current schedule ended with ``last`` (its final or its failed stage)."""

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        if self.awaiting:  # each stage continues from the one before: one at a time, also with --parallel
            raise ProposalDeferred(f"{self.name} schedule {self.count} waits for its stage to end")
        self.awaiting = True
        if not self.pending:
            self.count += 1
            self.pending, self.tip = self.draw(self.count), None
            self.length = len(self.pending)
        stage = self.length - len(self.pending) + 1
        values = self.space.check(self.pending.pop(0))
        return Proposal(parent=self.tip, hyperparameters=values,
                        rationale=f"schedule {self.count}, stage {stage} of {self.length}",
                        optuna_trial=self.trial_number())

    def trial_number(self) -> int | None:
        return None

    def withdraw(self, proposal: Proposal, reason: str | None = None) -> None:
        self.awaiting = False

    def withdraw_duplicate(self, proposal: Proposal, twin: Node, tree: Tree) -> None:
        """The stage already exists as ``twin``: the schedule continues from it (or ends
        there, when it was its last stage or failed)."""
        self.awaiting = False
        if twin.scored and self.pending:
            self.tip = twin.id
            return
        self.pending = []
        self.finished(tree, twin)

    def parents(self, tree: Tree) -> set[str]:
        """The tip of the schedule in progress: a schedule only continues its own last stage."""
        return {self.tip} if self.tip and self.pending else set()

    def observe(self, tree: Tree, node: Node) -> None:
        self.awaiting = False
        if node.scored and self.pending:
            self.tip = node.id
            return
        self.pending = []
        self.finished(tree, node)

    def restore(self, tree: Tree, session_metrics: dict[str, float]) -> None:
        """Rebuild the schedule in progress from a tree read back after a stop."""
        roots = tree.children(None)
        self.count = len(roots)
        if not roots:
            return
        chain = [roots[-1]]
        while children := tree.children(chain[-1].id):
            chain.append(children[0])
        last = chain[-1]
        schedule = None if last.status.value == "failed" else self.schedule_of(self.count)
        if schedule is None or len(chain) >= len(schedule):
            self.pending, self.tip = [], None
            return
        self.length = len(schedule)
        self.pending = schedule[len(chain):]
        self.tip = last.id  # a node still running is trained again first, then observed


class GridProposer(ScheduleProposer):
    name = "grid"

    def __init__(self, space: SearchSpace, max_depth: int, seed: int = 0):
        super().__init__(space, max_depth, seed)
        self.points = space.grid_points()
        random.Random(f"grid:{seed}").shuffle(self.points)
        self.level = 0

    def draw(self, index: int) -> list[dict[str, Any]]:
        while index > len(self.points):
            finer = [p for p in self.space.refined_grid_points(self.level + 1) if p not in self.points]
            if not finer:
                break  # nothing new at this resolution: the grid repeats (and the guard drops repeats)
            self.level += 1
            random.Random(f"grid:{self.seed}:{self.level}").shuffle(finer)
            self.points += finer
        point = self.points[(index - 1) % len(self.points)]
        return [dict(point) for _ in range(self.max_depth)]


class RandomScheduleProposer(ScheduleProposer):
    name = "random"

    def draw(self, index: int) -> list[dict[str, Any]]:
        rng = self.rng(index)
        return [self.space.sample(rng) for _ in range(rng.randint(1, self.max_depth))]


class DefaultsProposer(ScheduleProposer):
    name = "defaults"

    LENGTH = 1000  # longer than any budget: the budget ends the schedule, not its length

    def draw(self, index: int) -> list[dict[str, Any]]:
        return [self.space.defaults() for _ in range(self.LENGTH)]


def suggest(trial: optuna.Trial, name: str, param: Param) -> Any:
    if param.type == "categorical":
        return trial.suggest_categorical(name, param.choices)
    if param.type == "int":
        return trial.suggest_int(name, int(param.low), int(param.high), log=param.log)
    return trial.suggest_float(name, param.low, param.high, log=param.log)


class FlatTpeProposer(ScheduleProposer):
    name = "optuna"

    def __init__(self, space: SearchSpace, max_depth: int, study: optuna.Study, seed: int = 0):
        super().__init__(space, max_depth, seed)
        self.study = study
        self.trial: int | None = None  # the Optuna trial of the schedule in progress

    def running_trial(self, index: int):
        """The trial of schedule ``index`` if it was drawn and is not finished (after a stop)."""
        return next((t for t in self.study.trials
                     if t.state == TrialState.RUNNING and t.user_attrs.get("schedule") == index), None)

    def draw(self, index: int) -> list[dict[str, Any]]:
        if (trial := self.running_trial(index)) is not None:  # resuming: drawn before the stop
            params, self.trial = trial.params, trial.number
            return [{name: params[f"s{i}.{name}"] for name in self.space.params}
                    for i in range(1, params["stages"] + 1)]
        reseed(self.study, self.seed, index)
        trial = self.study.ask()
        trial.set_user_attr("schedule", index)
        self.trial = trial.number
        length = trial.suggest_int("stages", 1, self.max_depth)
        return [{name: suggest(trial, f"s{i}.{name}", param) for name, param in self.space.params.items()}
                for i in range(1, length + 1)]

    def trial_number(self) -> int | None:
        return self.trial

    def withdraw(self, proposal: Proposal, reason: str | None = None) -> None:
        super().withdraw(proposal, reason)
        fail_trial(self.study, proposal.optuna_trial)  # the schedule's trial: it no longer runs as drawn

    def schedule_of(self, index: int) -> list[dict[str, Any]] | None:
        return self.draw(index) if self.running_trial(index) is not None else None

    def finished(self, tree: Tree, last: Node) -> None:
        if self.trial is None:
            return
        if last.scored:
            self.study.tell(self.trial, last.val_score, skip_if_finished=True)
        else:
            self.study.tell(self.trial, state=TrialState.FAIL, skip_if_finished=True)
