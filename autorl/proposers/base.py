"""What every proposer returns, and the interface the controller calls."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from autorl.tree import Node, Tree


class Proposal(BaseModel):
    """The next stage: where it starts and what it trains with."""

    model_config = ConfigDict(extra="forbid")

    parent: str | None = Field(description="Node to continue from; null for the base model.")
    hyperparameters: dict[str, Any]
    rationale: str = ""
    expected_effect: str = ""
    optuna_trial: int | None = Field(None, description="Trial number when Optuna chose the values.")


class Proposer(Protocol):
    name: str

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        """Hyperparameters for a new stage from ``parent``."""

    def observe(self, tree: Tree, node: Node) -> None:
        """Learn from a finished (scored or failed) node."""
