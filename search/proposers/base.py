"""What every proposer returns, and everything the controller and resume may ask of one."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from search.edits import EditBlock
from search.tree import Node, Tree


class ProposalDropped(Exception):
    """A proposal stayed invalid after its repairs: no node is created for it."""


class ProposalDeferred(Exception):
    """Nothing can be proposed until a running stage ends (e.g. PBT's next round needs the
    scores of this one); the controller waits for one and asks again."""


class Proposal(BaseModel):
    """The next stage: where it starts and what it trains with."""

    model_config = ConfigDict(extra="forbid")

    parent: str | None = Field(description="Node to continue from; null for the base model.")
    hyperparameters: dict[str, Any]
    rationale: str = ""
    expected_effect: str = ""
    edit: list[EditBlock] = Field(default_factory=list, description="Search/replace blocks on train.py.")
    train_py: str | None = Field(None, description="The parent's train.py with the edit applied, if any.")
    optuna_trial: int | None = Field(None, description="Trial number when Optuna chose the values.")
    transcript: list[dict] = Field(default_factory=list, description="LLM messages and replies behind it.")
    repeat_of: str | None = Field(None, description="The node whose stage it trains again with another seed "
                                                    "(a repeat that measures seed noise).")


@runtime_checkable
class Proposer(Protocol):
    """The controller's only view of a proposer; resume uses the same methods."""

    name: str  # the strategy name; every node it proposes is labelled with it
    chooses_parent: bool  # True: it runs its own line, and no tree policy picks the parent

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        """The next stage from ``parent`` (the policy's pick; ignored when ``chooses_parent``)."""

    def observe(self, tree: Tree, node: Node) -> None:
        """Learn from a finished (scored or failed) node."""

    def withdraw(self, proposal: Proposal, reason: str | None = None) -> None:
        """``proposal`` will not run as proposed: a person rejected it (``reason`` says why,
        for the next proposal) or replaced its values."""

    def withdraw_duplicate(self, proposal: Proposal, twin: Node, tree: Tree) -> None:
        """``proposal`` nearly repeats ``twin`` and will not run; the next proposal should differ."""

    def withdraw_failure(self, proposal: Proposal, evidence: str) -> None:
        """``proposal`` lies where a stage already collapsed (``evidence`` says where) and will not run."""

    def restore(self, tree: Tree, session_metrics: dict[str, float]) -> None:
        """Rebuild the search state of a stopped session from its tree and logged metrics."""

    def usage(self) -> dict[str, float]:
        """Counters to log on the session run (LLM tokens, cost, dropped proposals); empty if none."""

    def parents(self, tree: Tree) -> set[str] | None:
        """The nodes a later proposal of this proposer may start from; None: those the tree
        policy may still pick. A node outside it never again gets a child (its checkpoint
        can go: autorl/loop/retention.py)."""


class BaseProposer:
    """Defaults for proposers with no trials to fail, no state to rebuild and no usage."""

    name = "base"
    chooses_parent = False

    def observe(self, tree: Tree, node: Node) -> None:
        pass

    def withdraw(self, proposal: Proposal, reason: str | None = None) -> None:
        pass

    def withdraw_duplicate(self, proposal: Proposal, twin: Node, tree: Tree) -> None:
        self.withdraw(proposal)

    def withdraw_failure(self, proposal: Proposal, evidence: str) -> None:
        self.withdraw(proposal)

    def restore(self, tree: Tree, session_metrics: dict[str, float]) -> None:
        pass

    def usage(self) -> dict[str, float]:
        return {}

    def parents(self, tree: Tree) -> set[str] | None:
        return None
