"""The tree strategy's proposer: Optuna TPE through ask/tell, steered by diagnosis.

The value told for a stage is its *gain over the parent* (validation score minus the
parent's), not its raw score: a second stage from a strong checkpoint and a first
stage from the base model are then judged on the same footing. The stage depth and
parent are stored as trial attributes. Only the controller talks to the study.

Before asking, the parent's findings narrow the space (``steering``): after entropy
collapse TPE samples only temperatures above the parent's, and so on. With ``local``
(``--local-steps``) a child samples every float parameter within one step of its
parent's value. A sample that
nearly repeats a sibling (``novelty``) is failed in the study and asked again; after
``MAX_RESAMPLES`` a uniform draw inside the same ranges replaces it.
"""

from __future__ import annotations

import random
from typing import Any

import optuna

from search.memory import learning_rate_limit
from search.novelty import duplicate_of
from search.prior import grown_ranges, lifted
from search.proposers.base import BaseProposer, Proposal
from search.space import SearchSpace
from search.steering import STEP, local_ranges, steered_space
from search.study import fail_orphan_trials, fail_trial, record_node, reseed
from search.tree import Node, Tree

MAX_RESAMPLES = 3


def below_limit(param, current: tuple[float, float] | None, limit: float) -> tuple[float, float] | None:
    """``current`` (or the whole range) cut just below ``limit``; None when nothing is left."""
    low, high = current or (param.low, param.high)
    high = min(high, limit * (1 - 1e-9))
    return (low, high) if low < high else None


class TpeProposer(BaseProposer):
    name = "tree"

    def __init__(self, space: SearchSpace, study: optuna.Study, start_with_defaults: bool = True,
                 steer: bool = True, seed: int = 0, avoid_collapses: bool = True, step: float = STEP,
                 schedule_prior: bool = False, local: bool = False):
        self.space = space
        self.local = local  # a child samples within one step of its parent's values (search/steering.py)
        self.step = step  # how far steering may move a parameter (search/steering.py)
        self.schedule_prior = schedule_prior  # capacity only grows along a path (search/prior.py)
        self.avoid_collapses = avoid_collapses
        self.study = study
        self.steer = steer
        self.seed = seed
        self.rng = random.Random(seed)
        self.rejected = 0  # proposals a person rejected; the sampler's seed moves on with them
        self.redraws: dict[int, int] = {}  # node count -> proposals sent back by the checks at that count
        self.nodes_seen = 0  # the node count of the last proposal
        if start_with_defaults and not study.trials:
            study.enqueue_trial(space.defaults())  # a known-good reference first

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        self.nodes_seen = len(tree.nodes)
        node = tree.nodes.get(parent) if parent else None
        findings = node.diagnosis if node and self.steer else []
        parent_values = node.hyperparameters if node else {}
        ranges, fixed, applied = steered_space(self.space, parent_values, findings, self.step)
        commit = node.commit if node else None
        notes = ([f"steered by {parent}'s diagnosis: " + ", ".join(f"{k} {v}" for k, v in applied.items())]
                 if applied else [])
        if self.local and node:
            ranges = local_ranges(self.space, parent_values, ranges, self.step)
        if self.schedule_prior and node:
            ranges = grown_ranges(self.space, parent_values, ranges, set(applied))
        if (limit := learning_rate_limit(tree, self.space)) is not None and self.avoid_collapses:
            if below := below_limit(self.space.params[limit.name], ranges.get(limit.name), limit.value):
                ranges[limit.name] = below
                notes.append(f"kept below {limit.name}={limit.value:.3g} ({limit.evidence.split(';')[0]})")
        for attempt in range(MAX_RESAMPLES):
            trial = self.ask(ranges, fixed, tree, parent, attempt)
            values, number = self.space.check(trial.params), trial.number
            if self.schedule_prior and node:
                values, moved = lifted(self.space, parent_values, values, set(applied))
                if moved:  # the values that run are not the trial's: the node is told as a trial of its own
                    notes.append(f"schedule prior: {', '.join(moved)}")
                    fail_trial(self.study, number)
                    number = None
            twin = duplicate_of(tree, self.space, parent, values, commit)
            if twin is None:
                rationale = "; ".join(["TPE sample", *notes])
                return Proposal(parent=parent, hyperparameters=values, rationale=rationale, optuna_trial=number)
            trial.set_user_attr("duplicate_of", twin)
            fail_trial(self.study, trial.number)
            notes.append(f"resampled a near-duplicate of {twin}")
        values = self.uniform(ranges, fixed, tree)
        return Proposal(parent=parent, hyperparameters=values,
                        rationale="; ".join(["uniform draw: TPE kept repeating earlier siblings", *notes]))

    def ask(self, ranges: dict[str, tuple[float, float]], fixed: dict[str, Any], tree: Tree,
            parent: str | None, attempt: int = 0) -> optuna.Trial:
        if fixed:
            self.study.enqueue_trial(fixed, skip_if_exists=False)
        distributions = {name: param.distribution(*ranges.get(name, (None, None)))
                         for name, param in self.space.params.items()}
        rejected = (self.rejected,) if self.rejected else ()  # a person said no: draw something else
        redraw = self.redraws_at(tree)
        redrawn = (redraw,) if redraw else ()  # so did a check
        reseed(self.study, self.seed, len(tree.nodes), attempt, *rejected, *redrawn)
        trial = self.study.ask(distributions)
        trial.set_user_attr("parent", parent or "base")
        trial.set_user_attr("depth", 1 if parent is None else tree.nodes[parent].depth + 1)
        return trial

    def uniform(self, ranges: dict[str, tuple[float, float]], fixed: dict[str, Any], tree: Tree) -> dict[str, Any]:
        redraw = self.redraws_at(tree)
        self.rng = random.Random(f"uniform:{self.seed}:{len(tree.nodes)}" + (f":{redraw}" if redraw else ""))
        values = self.space.sample(self.rng)
        for name, (low, high) in ranges.items():
            narrowed = self.space.params[name].model_copy(update={"low": low, "high": high})
            values[name] = narrowed.sample(self.rng)
        return self.space.check(values | fixed)

    def observe(self, tree: Tree, node: Node) -> None:
        record_node(self.study, self.space, tree, node)

    def withdraw(self, proposal: Proposal, reason: str | None = None) -> None:
        if reason is not None:  # rejected (an edit withdraws without a reason)
            self.rejected += 1
        fail_trial(self.study, proposal.optuna_trial)

    def withdraw_duplicate(self, proposal: Proposal, twin: Node, tree: Tree) -> None:
        self.redraw(proposal)

    def withdraw_failure(self, proposal: Proposal, evidence: str) -> None:
        self.redraw(proposal)

    def redraws_at(self, tree: Tree) -> int:
        return self.redraws.get(len(tree.nodes), 0)

    def redraw(self, proposal: Proposal) -> None:
        """A check sent ``proposal`` back: the next draw at this node count must differ (the
        sampler is seeded by where the search stands, so asking again would repeat it)."""
        self.redraws[self.nodes_seen] = self.redraws.get(self.nodes_seen, 0) + 1
        self.withdraw(proposal)

    def restore(self, tree: Tree, session_metrics: dict[str, float]) -> None:
        fail_orphan_trials(self.study, tree, set(self.space.params))
        self.rejected = int(session_metrics.get("rejected_proposals", 0))  # the controller's count of them
