"""What every proposer returns, and the interface the controller calls."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from autorl.edits import EditBlock
from autorl.tree import Node, Tree


class ProposalDropped(Exception):
    """A proposal stayed invalid after its repairs: no node is created for it."""


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
    proposer: str | None = Field(None, description="Who proposed it, when not the session's proposer.")
    transcript: list[dict] = Field(default_factory=list, description="LLM messages and replies behind it.")


class Proposer(Protocol):
    name: str

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        """Hyperparameters for a new stage from ``parent``."""

    def observe(self, tree: Tree, node: Node) -> None:
        """Learn from a finished (scored or failed) node."""
