"""One de-duplication for every proposer.

A stage that nearly repeats a sibling (same parent, same ``train.py``, every value within
a few percent of its range: ``search.novelty``) teaches nothing and is not run, whoever
proposed it. The proposer hears which node it repeated (``withdraw_duplicate``) and is
asked again: TPE's trial is failed, the LLM is told to propose something different, a
schedule continues from the node that already exists, greedy mutates again. A proposer
that keeps repeating itself gets its proposal dropped, so a session cannot loop.
"""

from __future__ import annotations

from search.novelty import duplicate_of
from search.proposers.base import Proposal, ProposalDropped, Proposer
from search.space import SearchSpace
from search.tree import Tree

MAX_REPEATS = 4


class Deduplicated:
    """Wraps a proposer; everything but ``propose`` is the wrapped proposer's own."""

    def __init__(self, inner: Proposer, space: SearchSpace):
        self.inner = inner
        self.space = space
        self.repeats = 0  # near-duplicates caught, for the session's counters

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        twins = []
        for _ in range(MAX_REPEATS):
            proposal = self.inner.propose(tree, parent)
            twin = None if proposal.edit else duplicate_of(tree, self.space, proposal.parent,
                                                           proposal.hyperparameters, same_script=True)
            if twin is None:
                return proposal
            self.repeats += 1
            twins.append(twin)
            self.inner.withdraw_duplicate(proposal, tree.nodes[twin], tree)
        raise ProposalDropped(f"{self.inner.name} proposed near-duplicates of {', '.join(twins)} "
                              f"{MAX_REPEATS} times in a row; nothing new to run from there")

    def usage(self) -> dict[str, float]:
        return {**self.inner.usage(), "near_duplicates": float(self.repeats)}
