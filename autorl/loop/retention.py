"""Which checkpoints a session keeps (``--keep-checkpoints``), so disk grows with the
frontier, not with the number of stages.

``frontier`` (the default) keeps the best node's checkpoint, those of every node a later
stage may still start from (the proposer says which, or the tree policy: a node it can
never pick again, because even its largest exploration bonus stays below a lasting
candidate's score, is not kept), those running stages start from, and the parent of a
proposal that waits for a person's decision. Every other checkpoint is deleted from the
artifact store and the session folder; the node's record, metrics, curves and
evaluations stay. Since the rules that pick a parent are the ones
that decide, no stage (and no resume) ever needs a deleted checkpoint. ``all`` keeps
every checkpoint.

A deletion is recorded before it is made: a kill in between leaves a checkpoint no
record points at, which the next start deletes again.
"""

from __future__ import annotations

from autorl.loop.budget import Budget
from autorl.loop.lifecycle import DELETED, STORED, StageLifecycle
from autorl.loop.observer import Observer
from search.policy import BestFirstPolicy
from search.proposers import Proposer
from search.tree import Status, Tree

KEEP_MODES = ("frontier", "all")
UNFINISHED = (Status.PENDING, Status.RUNNING, Status.INTERRUPTED)


class Retention:
    def __init__(self, mode: str, tree: Tree, stages: StageLifecycle, proposer: Proposer,
                 policy: BestFirstPolicy | None, budget: Budget, observer: Observer):
        self.mode = mode
        self.tree = tree
        self.stages = stages
        self.proposer = proposer
        self.policy = policy
        self.budget = budget
        self.observer = observer
        self.swept = False  # deletions recorded by an earlier process are made again once
        self.waiting: str | None = None  # the parent of a proposal waiting for a person's decision

    def keep(self) -> set[str]:
        """The nodes whose checkpoints stay."""
        best = self.tree.best()
        kept = {best.id} if best else set()
        kept |= {n.parent for n in self.tree.nodes.values() if n.status in UNFINISHED and n.parent}
        kept |= {self.waiting} if self.waiting else set()
        parents = self.proposer.parents(self.tree)
        if parents is None:
            parents = (self.policy.reachable(self.tree, self.max_nodes()) if self.policy
                       else {n.id for n in self.tree.scored()})
        return kept | parents

    def max_nodes(self) -> int | None:
        """The most nodes the session can have, when its budget caps them."""
        left, _ = self.budget.stages_left(self.budget.min_stage_steps)
        return None if left is None else len(self.tree.nodes) + max(0, left) + 1

    def prune(self) -> list[str]:
        """Delete the checkpoints no stage will need; returns the nodes whose went."""
        if self.mode == "all":
            return []
        if not self.swept:
            for node in self.tree.nodes.values():
                if node.checkpoint == DELETED:
                    self.stages.delete_checkpoint(node)
            self.swept = True
        kept = self.keep()
        dropped = [n for n in self.tree.nodes.values() if n.checkpoint == STORED and n.id not in kept]
        for node in dropped:
            self.stages.delete_checkpoint(node)
        if dropped:
            self.observer.message(f"checkpoints deleted (no later stage can start from them): "
                                  f"{', '.join(n.id for n in dropped)}")
        return [n.id for n in dropped]
