"""Checks every proposal passes before it costs a stage, whoever proposed it.

- **Novelty** (every strategy): a stage that nearly repeats a sibling (same parent, same
  ``train.py``, every value within a few percent of its range: ``search.novelty``)
  teaches nothing. The proposer hears which node it repeated (``withdraw_duplicate``):
  TPE's trial is failed, the LLM is told to propose something different, a schedule
  continues from the node that already exists, greedy and PBT draw again.
- **Memory** (autorl's own strategies: tree, llm, hybrid; the baselines stay as
  published): a stage at or above a learning rate that already collapsed a stage
  (``search.memory``) goes back to its proposer with the evidence (``withdraw_failure``),
  so an LLM that proposes a known failure gets one repair before it costs compute.

A proposer that keeps failing the checks has its proposal dropped, so a session cannot loop.
"""

from __future__ import annotations

from search.memory import learning_rate_limit
from search.novelty import duplicate_of
from search.proposers.base import Proposal, ProposalDropped, Proposer
from search.space import SearchSpace
from search.tree import Tree

MAX_ATTEMPTS = 4


class Guarded:
    """Wraps a proposer; everything but ``propose`` and ``usage`` is the wrapped proposer's own."""

    def __init__(self, inner: Proposer, space: SearchSpace, remember: bool = True):
        self.inner = inner
        self.space = space
        self.remember = remember
        self.repeats = 0  # near-duplicates caught
        self.known_failures = 0  # proposals sent back for a known collapse

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        refused = []
        for _ in range(MAX_ATTEMPTS):
            proposal = self.inner.propose(tree, parent)
            why = self.refusal(tree, proposal)
            if why is None:
                return proposal
            refused.append(why)
        raise ProposalDropped(f"{self.inner.name}'s proposals failed the checks {MAX_ATTEMPTS} times in a row "
                              f"({'; '.join(dict.fromkeys(refused))}); nothing new to run from there")

    def refusal(self, tree: Tree, proposal: Proposal) -> str | None:
        """Why ``proposal`` may not run (after telling its proposer), or None."""
        twin = None if proposal.edit else duplicate_of(tree, self.space, proposal.parent, proposal.hyperparameters,
                                                       same_script=True)
        if twin is not None:
            self.repeats += 1
            self.inner.withdraw_duplicate(proposal, tree.nodes[twin], tree)
            return f"near-duplicate of {twin}"
        limit = learning_rate_limit(tree, self.space) if self.remember else None
        if limit is not None and limit.breached_by(proposal.hyperparameters):
            self.known_failures += 1
            self.inner.withdraw_failure(proposal, limit.evidence)
            return f"{limit.name} in a collapsed region"
        return None

    def usage(self) -> dict[str, float]:
        return {**self.inner.usage(), "near_duplicates": float(self.repeats),
                "known_failures_refused": float(self.known_failures)}
